package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/queue"
)

// RunRetention bounds what prflow-runs keeps. Only finished runs go, each archived first (a
// run.archived audit entry with its summary); a running, waiting or parked run is never
// deleted, whatever its age. Zero fields mean no limit of that kind.
type RunRetention struct {
	// MaxAge deletes finished runs that ended longer ago than this.
	MaxAge time.Duration
	// KeepCount keeps the newest KeepCount runs (by creation, running ones included); of the
	// older ones the finished go.
	KeepCount int
	// Every is how often a controller sweeps (0: DefaultRetentionEvery).
	Every time.Duration
}

// DefaultRunRetention keeps 90 days of finished runs (as long as the audit log keeps their
// summaries by default) and no count limit.
var DefaultRunRetention = RunRetention{MaxAge: 90 * 24 * time.Hour}

// DefaultRetentionEvery is how often the retention sweep runs.
const DefaultRetentionEvery = 10 * time.Minute

// retentionGrace spares runs that ended moments ago, whatever the limits: their cleanup jobs
// (closing PRs, leaving merge queues) and notifications may still report back.
const retentionGrace = 10 * time.Minute

// retentionActor is the audit actor of archived runs.
const retentionActor = "prflow:retention"

// WithRunRetention makes the controller sweep prflow-runs with r (see RunRetention).
func WithRunRetention(r RunRetention) Option { return func(c *Controller) { c.retention = &r } }

// Check reports a limit that makes no sense.
func (r RunRetention) Check() error {
	if r.MaxAge < 0 {
		return fmt.Errorf("runs retention: keep-days %s is negative (0 keeps runs of any age)", r.MaxAge)
	}
	if r.KeepCount < 0 {
		return fmt.Errorf("runs retention: keep-count %d is negative (0 means no count limit)", r.KeepCount)
	}
	if r.Every < 0 {
		return fmt.Errorf("runs retention: sweep interval %s is negative", r.Every)
	}
	return nil
}

// retainRuns sweeps prflow-runs every r.Every until ctx ends (Run starts it with
// WithRunRetention). Replicas may sweep at once: each run is claimed by its revision first.
func (c *Controller) retainRuns(ctx context.Context) {
	r := c.retention
	if r == nil || r.MaxAge == 0 && r.KeepCount == 0 {
		return
	}
	every := r.Every
	if every == 0 {
		every = DefaultRetentionEvery
	}
	if c.runsLoaded(ctx) != nil {
		return
	}
	for {
		if n, err := c.SweepRuns(ctx, *r, time.Now()); err != nil && ctx.Err() == nil {
			c.log.Warn("runs retention sweep", "archived", n, "err", err)
		} else if n > 0 {
			c.log.Info("runs retention: finished runs archived and deleted", "runs", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// SweepRuns archives and deletes the finished runs beyond r as of now, returning how many it
// deleted. Without an audit log there is nowhere to archive to, and nothing is deleted.
func (c *Controller) SweepRuns(ctx context.Context, r RunRetention, now time.Time) (int, error) {
	if err := r.Check(); err != nil {
		return 0, err
	}
	if c.audit == nil {
		return 0, errors.New("runs retention: no audit log to archive finished runs to (nothing deleted)")
	}
	if err := c.runsLoaded(ctx); err != nil {
		return 0, err
	}
	var due []string
	pos := 0
	c.runs.walk(nil, func(s *RunSummary) bool {
		pos++
		if !s.Terminal() {
			return true
		}
		ended := s.Ended
		if ended.IsZero() {
			ended = s.Created
		}
		if now.Sub(ended) < retentionGrace {
			return true
		}
		if r.MaxAge > 0 && now.Sub(ended) > r.MaxAge || r.KeepCount > 0 && pos > r.KeepCount {
			due = append(due, s.ID)
		}
		return true
	})
	n := 0
	var errs []error
	for _, id := range due {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		done, err := c.archiveRun(ctx, id)
		if err != nil {
			errs = append(errs, err)
			if len(errs) >= 10 {
				break // the store or the audit log is in trouble: try again next sweep
			}
			continue
		}
		if done {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// archiveRun archives and deletes one finished run, reporting whether it did. The state is
// read again (the index may lag): a run that is not finished stays. Of two sweeps on the same
// run only one goes on: the one that creates the run's retention lease in prflow-locks (a
// create at revision 0; the lease expires with the bucket's TTL if its holder dies). The
// holder archives the revision it read and deletes the run only at that revision.
func (c *Controller) archiveRun(ctx context.Context, id string) (bool, error) {
	e, err := c.b.Runs.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil // deleted meanwhile (another replica's sweep)
	}
	if err != nil {
		return false, fmt.Errorf("runs retention: read run %s: %w", id, err)
	}
	var r pipelines.Run
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return false, fmt.Errorf("runs retention: run %s: unreadable state (left alone): %w", id, err)
	}
	if !r.Status.Terminal() || r.Parked() {
		return false, nil // running, waiting or parked: never deleted
	}
	lease := queue.LeaseKey("retention", id)
	if _, err := c.b.Locks.Create(ctx, lease, []byte(strconv.FormatUint(e.Revision(), 10))); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return false, nil // another sweep has it
		}
		return false, fmt.Errorf("runs retention: lease for run %s: %w", id, err)
	}
	defer func() { _ = c.b.Locks.Delete(context.WithoutCancel(ctx), lease) }()
	// Taken after the other sweep deleted the run and dropped its lease: nothing left to do.
	if cur, err := c.b.Runs.Get(ctx, id); err != nil || cur.Revision() != e.Revision() {
		return false, nil
	}
	entry := audit.Entry{Actor: retentionActor, Action: audit.RunArchived, Run: id, Detail: archiveDetail(summarize(&r, e.Revision())),
		ID: fmt.Sprintf("%s/%s/%d", audit.RunArchived, id, e.Revision())}
	if err := c.audit.Append(ctx, entry); err != nil {
		return false, fmt.Errorf("runs retention: run %s not deleted: %w", id, err)
	}
	if err := c.b.Runs.Purge(ctx, id, jetstream.LastRevision(e.Revision())); err != nil {
		if wrongRevision(err) {
			return false, nil // changed after it was read (a late event): kept, archived again next time
		}
		return false, fmt.Errorf("runs retention: delete run %s (archived): %w", id, err)
	}
	return true, nil
}

// archiveDetail is a run's summary as the audit log keeps it, for people.
func archiveDetail(s *RunSummary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pipeline %s, %s", s.Pipeline, s.stored)
	if s.Executor != "" {
		fmt.Fprintf(&b, ", started by %s", s.Executor)
	}
	if t := s.Trigger; t != nil && t.Provider != "" {
		fmt.Fprintf(&b, ", %s %s", t.Provider, t.Repo)
		if t.PR > 0 {
			fmt.Fprintf(&b, " #%d", t.PR)
		}
		if t.SHA != "" {
			fmt.Fprintf(&b, " @%s", t.SHA)
		}
	}
	fmt.Fprintf(&b, ", created %s", s.Created.UTC().Format(time.RFC3339))
	if !s.Ended.IsZero() {
		fmt.Fprintf(&b, ", ended %s", s.Ended.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(&b, ", %d of %d stages done", s.StagesDone, s.StagesTotal)
	if s.Error != "" {
		fmt.Fprintf(&b, ", error: %s", oneLine(s.Error, 200))
	}
	return b.String()
}

// oneLine cuts s to its first line of at most n bytes.
func oneLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// wrongRevision reports a write refused because the key moved past the revision it named
// (single servers and clusters report it with different codes).
func wrongRevision(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
