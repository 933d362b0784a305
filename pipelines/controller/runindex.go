package controller

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/rbac"
)

// RunSummary is what a run list shows of a run. The runs watcher keeps one per run in memory
// (runIndex), so listing runs reads and decodes nothing from prflow-runs.
type RunSummary struct {
	ID       string `json:"id"`
	Pipeline string `json:"pipeline"`
	Spec     string `json:"spec"`
	// Status is the shown status: waitingApproval and waitingIntervention are derived from
	// parked steps, never stored (pipelines.Run.Shown).
	Status   pipelines.Status       `json:"status"`
	Executor string                 `json:"executor,omitempty"`
	Error    string                 `json:"error,omitempty"`
	Created  time.Time              `json:"created"`
	Started  time.Time              `json:"started,omitzero"`
	Ended    time.Time              `json:"ended,omitzero"`
	Trigger  *pipelines.TriggerInfo `json:"trigger,omitempty"`
	// StagesTotal is how many stages the run has, StagesDone how many succeeded or were skipped.
	// (Not "stages": a client decoding a list into pipelines.Run reads that as the stages.)
	StagesTotal int    `json:"stagesTotal"`
	StagesDone  int    `json:"stagesDone"`
	Parked      bool   `json:"parked,omitempty"` // a step waits (approval, merge, sync, soak)
	RerunOf     string `json:"rerunOf,omitempty"`
	RetryOf     string `json:"retryOf,omitempty"`

	stored  pipelines.Status // the run's stored status (Terminal, the retention sweep)
	rev     uint64
	objects []string // RBAC objects of getting the run (RunObjects), shared between runs
}

// Terminal reports whether the run ended.
func (s *RunSummary) Terminal() bool { return s.stored.Terminal() }

// summarize builds r's summary. r belongs to the caller's goroutine only during the call:
// nothing of it that may change later is kept (the trigger is copied without its path check).
func summarize(r *pipelines.Run, rev uint64) *RunSummary {
	s := &RunSummary{ID: r.ID, Pipeline: r.Pipeline, Spec: r.Spec, Status: r.Shown(), Executor: r.Executor,
		Error: r.Error, Created: r.Created, Started: r.Started, Ended: r.Ended, StagesTotal: len(r.Stages),
		Parked: r.Parked(), RerunOf: r.RerunOf, RetryOf: r.RetryOf, stored: r.Status, rev: rev}
	if r.Trigger != nil {
		t := *r.Trigger
		t.PathCheck, t.Paths = nil, nil
		s.Trigger = &t
	}
	for _, st := range r.Stages {
		if st.Status == pipelines.StSucceeded || st.Status == pipelines.StSkipped {
			s.StagesDone++
		}
	}
	return s
}

// Matches reports whether the run passes a status filter (RunStatusFilters; "" passes all).
func (s *RunSummary) Matches(status string) bool {
	switch status {
	case "":
		return true
	case "active":
		return !s.stored.Terminal()
	case "waiting":
		return s.Parked
	case "waitingApproval":
		return s.Status == pipelines.StWaitingApproval
	}
	return string(s.stored) == status
}

// RunStatusFilters are the status filters of run lists: "active" is every run not finished,
// "waiting" every run with a parked step (an approval, a PR merge, a sync), "waitingApproval"
// those waiting for an approval. A run's stored status is never "waiting" (only steps park).
var RunStatusFilters = []string{"active", "waitingApproval", "waiting", "succeeded", "failed", "cancelled", "rolledBack"}

// runIndex holds every run's summary, oldest first by (created, id): a new run appends, and
// a list walks back from the end. Summaries are never changed once in the index (a newer
// revision replaces the pointer), so a reader copies pointers under the lock and reads freely.
type runIndex struct {
	mu      sync.RWMutex
	list    []*RunSummary
	byID    map[string]*RunSummary
	objects map[string][]string // interned RBAC object lists
}

// before orders summaries oldest first; ids break ties of equal creation times.
func before(a, b *RunSummary) int {
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// put takes in revision rev of run r; an older revision than the one indexed is dropped.
// objects computes the run's RBAC objects when it is new to the index.
func (x *runIndex) put(r *pipelines.Run, rev uint64, objects func() []string) {
	if r == nil || r.ID == "" {
		return
	}
	s := summarize(r, rev)
	x.mu.RLock()
	old := x.byID[r.ID]
	x.mu.RUnlock()
	if old != nil && old.rev > rev && rev != 0 {
		return
	}
	var objs []string
	if old != nil {
		objs = old.objects
	} else if objects != nil {
		objs = objects() // outside the lock: it may read the pipeline's spec
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.byID == nil {
		x.byID, x.objects = map[string]*RunSummary{}, map[string][]string{}
	}
	if objs != nil {
		key := strings.Join(objs, "\x00")
		if shared, ok := x.objects[key]; ok {
			objs = shared
		} else if len(x.objects) < maxInterned {
			x.objects[key] = objs
		}
	}
	s.objects = objs
	old = x.byID[r.ID]
	if old != nil {
		if old.rev > rev && rev != 0 {
			return
		}
		if s.objects == nil {
			s.objects = old.objects
		}
		if before(old, s) == 0 {
			x.list[x.find(old)] = s
			x.byID[r.ID] = s
			return
		}
		x.list = slices.Delete(x.list, x.find(old), x.find(old)+1) // its creation time changed (never expected)
	}
	x.byID[r.ID] = s
	if n := len(x.list); n == 0 || before(x.list[n-1], s) < 0 {
		x.list = append(x.list, s) // the common case: the newest run
		return
	}
	i, _ := slices.BinarySearchFunc(x.list, s, before)
	x.list = slices.Insert(x.list, i, s)
}

// maxInterned bounds the interned object lists (distinct pipeline × environment sets).
const maxInterned = 4096

// find is the position of s in the list; the caller holds the lock and s is in the list.
func (x *runIndex) find(s *RunSummary) int {
	i, _ := slices.BinarySearchFunc(x.list, s, before)
	return i
}

// remove drops run id (deleted from prflow-runs).
func (x *runIndex) remove(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.byID[id]
	if s == nil {
		return
	}
	delete(x.byID, id)
	if i := x.find(s); i < len(x.list) && x.list[i] == s {
		x.list = slices.Delete(x.list, i, i+1)
	}
}

// get returns run id's summary, or nil.
func (x *runIndex) get(id string) *RunSummary {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.byID[id]
}

// len is how many runs the index holds.
func (x *runIndex) len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.list)
}

// walk calls fn on summaries newest first, starting after cursor position at (nil: the
// newest), in batches so that the lock is never held while fn runs; fn returns false to stop.
func (x *runIndex) walk(at *RunSummary, fn func(*RunSummary) bool) {
	const batch = 256
	buf := make([]*RunSummary, 0, batch)
	for {
		buf = buf[:0]
		x.mu.RLock()
		end := len(x.list)
		if at != nil {
			end, _ = slices.BinarySearchFunc(x.list, at, before) // every summary older than at
		}
		for i := end - 1; i >= 0 && len(buf) < batch; i-- {
			buf = append(buf, x.list[i])
		}
		x.mu.RUnlock()
		for _, s := range buf {
			if !fn(s) {
				return
			}
		}
		if len(buf) < batch {
			return
		}
		at = buf[len(buf)-1]
	}
}

// ListOptions select a page of runs.
type ListOptions struct {
	// Limit is the page size: 0 or less means DefaultRunsLimit, more than MaxRunsLimit is cut to it.
	Limit int
	// Cursor is a Next of an earlier page: the page holds the runs older than that page's last.
	Cursor string
	// Pipeline and Status filter (Status: one of RunStatusFilters).
	Pipeline, Status string
	// Keep, when set, drops the runs it returns false for (the caller's RBAC).
	Keep func(*RunSummary) bool
}

// RunPage is a page of runs, newest first.
type RunPage struct {
	Runs []*RunSummary `json:"runs"`
	// Next is the cursor of the page after this one; empty on the last page.
	Next string `json:"next,omitempty"`
	// Limit is the page size used (after DefaultRunsLimit and MaxRunsLimit).
	Limit int `json:"limit"`
}

// DefaultRunsLimit and MaxRunsLimit bound a page of runs.
const (
	DefaultRunsLimit = 50
	MaxRunsLimit     = 500
)

// ErrBadCursor is a cursor this server did not hand out (or a mangled one).
var ErrBadCursor = errors.New("bad cursor")

// cursorPrefix versions the cursor format.
const cursorPrefix = "r1."

// encodeCursor names the position just after s: the page that follows holds older runs.
// A position, not an offset: runs started meanwhile do not shift it.
func encodeCursor(s *RunSummary) string {
	raw := strconv.FormatInt(s.Created.UnixNano(), 36) + "." + s.ID
	return cursorPrefix + base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// decodeCursor turns a cursor back into a position.
func decodeCursor(c string) (*RunSummary, error) {
	rest, ok := strings.CutPrefix(c, cursorPrefix)
	if !ok {
		return nil, fmt.Errorf("%w %.40q: not a cursor from a runs list's \"next\"", ErrBadCursor, c)
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("%w %.40q: not base64url: %w", ErrBadCursor, c, err)
	}
	nanos, id, ok := strings.Cut(string(raw), ".")
	n, err := strconv.ParseInt(nanos, 36, 64)
	if !ok || err != nil || !validKey(id) {
		return nil, fmt.Errorf("%w %.40q: damaged (want a creation time and a run id)", ErrBadCursor, c)
	}
	return &RunSummary{ID: id, Created: time.Unix(0, n)}, nil
}

// ListRuns returns a page of runs from the runs index, newest first by creation time,
// decoding nothing. Runs started while a reader pages are never shown twice or skipped:
// a cursor names a position (creation time and id), not an offset.
func (c *Controller) ListRuns(ctx context.Context, o ListOptions) (RunPage, error) {
	if o.Status != "" && !slices.Contains(RunStatusFilters, o.Status) {
		return RunPage{}, fmt.Errorf("%w: status filter %q: want one of %s", ErrInvalid, o.Status, strings.Join(RunStatusFilters, ", "))
	}
	var at *RunSummary
	if o.Cursor != "" {
		var err error
		if at, err = decodeCursor(o.Cursor); err != nil {
			return RunPage{}, err
		}
	}
	if err := c.runsLoaded(ctx); err != nil {
		return RunPage{}, err
	}
	limit := o.Limit
	if limit <= 0 {
		limit = DefaultRunsLimit
	}
	limit = min(limit, MaxRunsLimit)
	page := RunPage{Runs: []*RunSummary{}, Limit: limit}
	more := false
	c.runs.walk(at, func(s *RunSummary) bool {
		if o.Pipeline != "" && s.Pipeline != o.Pipeline || !s.Matches(o.Status) || o.Keep != nil && !o.Keep(s) {
			return true
		}
		if len(page.Runs) == limit {
			more = true
			return false
		}
		page.Runs = append(page.Runs, s)
		return true
	})
	if more {
		page.Next = encodeCursor(page.Runs[len(page.Runs)-1])
	}
	return page, nil
}

// RunPipelines names the pipelines of the indexed runs that keep passes (nil: all), sorted.
func (c *Controller) RunPipelines(ctx context.Context, keep func(*RunSummary) bool) ([]string, error) {
	if err := c.runsLoaded(ctx); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	c.runs.walk(nil, func(s *RunSummary) bool {
		if !seen[s.Pipeline] && (keep == nil || keep(s)) {
			seen[s.Pipeline] = true
		}
		return true
	})
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}

// runsLoaded waits until the runs watcher replayed every run into the index.
func (c *Controller) runsLoaded(ctx context.Context) error {
	select {
	case <-c.loaded:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("list runs: the controller has not read prflow-runs yet: %w", ctx.Err())
	}
}

// indexRun takes a run state (revision rev) into the runs index.
func (c *Controller) indexRun(r *pipelines.Run, rev uint64) {
	c.runs.put(r, rev, func() []string {
		if c.rbac == nil {
			return nil // no RBAC: CanGetSummary needs no objects
		}
		return c.RunObjects(context.Background(), r, rbac.Get)
	})
}

// CanGetSummary reports whether u may get the run s summarizes (CanGetRun, from the index).
func (c *Controller) CanGetSummary(ctx context.Context, u User, s *RunSummary) bool {
	if c.Policy().IsOpen() {
		return u.Name != ""
	}
	objs := s.objects
	if objs == nil {
		// Indexed before RBAC was configured: the objects come from the stored run, once.
		r, err := c.Get(ctx, s.ID)
		if err != nil {
			return false
		}
		objs = c.RunObjects(ctx, r, rbac.Get)
	}
	return canAll(c.Policy(), u, rbac.Runs, rbac.Get, objs)
}
