package environments

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// The controller holds no forge credentials, so the model learns what the release files hold
// after a hand commit (and checks what a prflow merge left there) by dispatching a
// ReadReleaseValues job to the workers, like a push trigger's path check: under reserved ids
// (run ReadRunPrefix+id, stage ReadStage, step ReadStep), retried by the worker with backoff on
// forge errors, its result applied by the controller (ApplyRead). Each read is one key of
// prflow-envs (queue.EnvReadKey): the request, its state and its result, so every replica sees
// it, a restart does not read again, and a commit is read once for a set of files and keys.
//
// Reads are asked for after each build (built.wants) and sent per release branch once the
// branch has been quiet for readQuiet, or at most readMaxDelay after the first want: a burst of
// pushes costs a read or two, not one per push.

// ReadRunPrefix starts the run id of every read job; no run id (pipelines.NewRunID,
// TriggerRunID) starts with an underscore.
const ReadRunPrefix = "_envread-"

// The reserved stage and step ids of a read job (see pipelines.PathCheckStage).
const (
	ReadStage = "_envs"
	ReadStep  = "_read"
)

// IsReadRun reports whether a job or event's run id is a read's.
func IsReadRun(run string) bool { return strings.HasPrefix(run, ReadRunPrefix) }

// Read pacing, and how often a read that failed on forge errors is tried again.
var (
	readQuiet    = time.Second
	readMaxDelay = 5 * time.Second
	readTick     = 100 * time.Millisecond
	readBackoff  = 30 * time.Second // doubled per attempt, at most readMaxBackoff
	// readStale: a read still "reading" after this long lost its job (a controller died
	// between storing the request and dispatching it): it is asked for again.
	readStale = 5 * time.Minute
)

const (
	readMaxBackoff  = 10 * time.Minute
	maxReadAttempts = 6
)

// Read states (ValuesRead.State).
const (
	readReading = "reading"
	readDone    = "read"
	readFailed  = "failed"
)

// readRecord is one read: the value of its prflow-envs key. It carries no token: the job names
// a connector, the worker holds its credentials.
type readRecord struct {
	ID        string          `json:"id"`
	Repo      string          `json:"repo"`
	Branch    string          `json:"branch"`
	Connector string          `json:"connector"`
	Commit    string          `json:"commit"`
	Before    string          `json:"before,omitempty"` // a comparison before..Commit was asked for
	Files     []string        `json:"files"`
	Keys      []steps.ReadKey `json:"keys,omitempty"`
	State     string          `json:"state"`
	Attempt   int             `json:"attempt"`
	Requested time.Time       `json:"requested"`
	Ended     time.Time       `json:"ended,omitzero"`
	Error     string          `json:"error,omitempty"`
	// Transient: the failure was the forge's (5xx, rate limit, unreachable) or a lost worker,
	// so the read is asked for again after a backoff; a 401/403 or a bad request is not.
	Transient bool              `json:"transient,omitempty"`
	Result    *steps.ReadResult `json:"result,omitempty"`

	rev uint64 // the entry's revision, for the next update
}

// readRequest is a read a build wants.
type readRequest struct {
	repo, branch, connector, commit, before string
	files                                   []string
	keys                                    []steps.ReadKey
	retry                                   *readRecord // a failed or lost read of the same request
}

func (q *readRequest) id() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00", strings.ToLower(q.repo), q.branch, q.commit, q.before)
	for _, f := range q.files {
		fmt.Fprintf(h, "f%s\x00", f)
	}
	for _, k := range q.keys {
		fmt.Fprintf(h, "k%s\x00%s\x00", k.File, k.Key)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// covers reports whether the read has every file and key of an environment.
func (r *readRecord) covers(files []string, keys []steps.ReadKey) bool {
	for _, f := range files {
		if !slices.Contains(r.Files, f) {
			return false
		}
	}
	for _, k := range keys {
		if !slices.Contains(r.Keys, k) {
			return false
		}
	}
	return true
}

// due says when a read that failed may be tried again (zero: never).
func (r *readRecord) due() time.Time {
	switch {
	case r.State == readReading:
		return r.Requested.Add(readStale)
	case r.State != readFailed || !r.Transient || r.Attempt >= maxReadAttempts:
		return time.Time{}
	}
	d := readBackoff << min(r.Attempt-1, 10)
	return r.Ended.Add(min(d, readMaxBackoff))
}

// applyReadEntry takes in a read's prflow-envs entry.
func (m *Model) applyReadEntry(e jetstream.KeyValueEntry) bool {
	id := strings.TrimPrefix(e.Key(), queue.EnvReadPrefix)
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		_, had := m.reads[id]
		delete(m.reads, id)
		return had
	}
	var r readRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil || r.ID != id {
		m.src.Log.Warn("environments: unreadable read record", "key", e.Key(), "err", err)
		return false
	}
	r.rev = e.Revision()
	m.reads[id] = &r
	return true
}

// ApplyRead records the result of a read job (a result or a dead letter of a run id
// IsReadRun says is a read's). A stale or repeated result changes nothing. An error is worth
// a retry of the event.
func (m *Model) ApplyRead(ctx context.Context, ev *envelope.Event) error {
	if ev.Kind != queue.EvResult && ev.Kind != queue.EvDead {
		return nil
	}
	id := strings.TrimPrefix(ev.Run, ReadRunPrefix)
	key := queue.EnvReadKey(id)
	for range 10 {
		e, err := m.src.History.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			m.src.Log.Warn("environments: result of an unknown read dropped", "read", id)
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s/%s: %w", queue.BucketEnvs, key, err)
		}
		var r readRecord
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			return nil // not ours to repair; the next want writes a fresh request
		}
		if r.State != readReading || r.Attempt != ev.Attempt || ev.Stage != ReadStage || ev.Step != ReadStep {
			return nil // stale or repeated
		}
		r.Ended = time.Now().UTC()
		res := ev.Result
		switch {
		case ev.Kind == queue.EvDead || res == nil:
			r.State, r.Error, r.Transient = readFailed, cmpOr(ev.Reason, "the read job was lost"), true
		case res.Status == steps.Succeeded:
			rr, err := steps.DecodeReadResult(res.Outputs)
			if err != nil {
				r.State, r.Error = readFailed, err.Error()
			} else {
				r.State, r.Result, r.Error = readDone, rr, ""
			}
		default:
			// The worker retried forge errors with backoff until MaxDeliver ("gave up after N
			// attempts: …"); any other failure is terminal (401/403, bad input).
			r.State, r.Error = readFailed, cmpOr(res.Message, "the read failed")
			r.Transient = strings.HasPrefix(res.Message, "gave up after ")
		}
		data, err := json.Marshal(&r)
		if err != nil {
			return err
		}
		if _, err := m.src.History.Update(ctx, key, data, e.Revision()); err != nil {
			if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			return fmt.Errorf("write %s/%s: %w", queue.BucketEnvs, key, err)
		}
		m.src.Log.Info("environments: release values read", "repo", r.Repo, "branch", r.Branch, "commit", r.Commit, "state", r.State, "err", r.Error)
		return nil
	}
	return fmt.Errorf("write %s/%s: too many concurrent updates", queue.BucketEnvs, key)
}

// dueBranch is what one release branch waits to have read.
type dueBranch struct {
	wants       map[string]readRequest
	first, last time.Time
}

// want takes in the reads a build asked for (replacing what each branch waited for).
func (m *Model) want(wants []readRequest, now time.Time) {
	byBranch := map[string]map[string]readRequest{}
	for _, q := range wants {
		bk := branchKey(q.repo, q.branch)
		if byBranch[bk] == nil {
			byBranch[bk] = map[string]readRequest{}
		}
		byBranch[bk][q.id()] = q
	}
	m.dueMu.Lock()
	defer m.dueMu.Unlock()
	for bk := range m.due {
		if _, ok := byBranch[bk]; !ok {
			delete(m.due, bk) // read meanwhile (by another replica), or no longer needed
		}
	}
	for bk, ws := range byBranch {
		d := m.due[bk]
		if d == nil {
			m.due[bk] = &dueBranch{wants: ws, first: now, last: now}
			continue
		}
		if !sameKeys(d.wants, ws) {
			d.last = now
		}
		d.wants = ws
	}
}

func sameKeys(a, b map[string]readRequest) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

// sendReads dispatches the reads of the branches that have waited long enough.
func (m *Model) sendReads(ctx context.Context, now time.Time) {
	var send []readRequest
	m.dueMu.Lock()
	for bk, d := range m.due {
		if now.Sub(d.last) >= readQuiet || now.Sub(d.first) >= readMaxDelay {
			for _, q := range d.wants {
				send = append(send, q)
			}
			delete(m.due, bk)
		}
	}
	m.dueMu.Unlock()
	for _, q := range send {
		if err := m.dispatchRead(ctx, q); err != nil && ctx.Err() == nil {
			m.src.Log.Warn("environments: read of release values not dispatched; will try again", "repo", q.repo, "branch", q.branch, "commit", q.commit, "err", err)
		}
	}
}

// dispatchRead stores the read's request (or its next attempt) and sends its job. The store is
// revision-checked, so of several replicas wanting one read, one sends it.
func (m *Model) dispatchRead(ctx context.Context, q readRequest) error {
	if m.src.Dispatch == nil {
		return nil
	}
	id := q.id()
	key := queue.EnvReadKey(id)
	r := readRecord{ID: id, Repo: q.repo, Branch: q.branch, Connector: q.connector, Commit: q.commit, Before: q.before,
		Files: q.files, Keys: q.keys, State: readReading, Attempt: 1, Requested: time.Now().UTC()}
	data, err := json.Marshal(&r)
	if err != nil {
		return err
	}
	if q.retry != nil {
		r.Attempt = q.retry.Attempt + 1
		if data, err = json.Marshal(&r); err != nil {
			return err
		}
		_, err = m.src.History.Update(ctx, key, data, q.retry.rev)
	} else {
		_, err = m.src.History.Create(ctx, key, data)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return nil // another replica asked first
	}
	if err != nil {
		return fmt.Errorf("write %s/%s: %w", queue.BucketEnvs, key, err)
	}
	j := readJob(&r, m.pool())
	if err := m.src.Dispatch(ctx, j); err != nil {
		// The request stays "reading" until readStale, then is asked for again.
		return fmt.Errorf("dispatch %s: %w", j.ID(), err)
	}
	m.reqs.Add(1)
	return nil
}

func (m *Model) pool() string {
	if m.src.Registry != nil {
		if def, ok := m.src.Registry.Lookup(steps.TypeReadReleaseValues); ok && def.Pool != "" {
			return def.Pool
		}
	}
	return pipelines.DefaultPool
}

// readJob is the job of a read; it names the connector, never a credential.
func readJob(r *readRecord, pool string) *envelope.Job {
	files := make([]any, len(r.Files))
	for i, f := range r.Files {
		files[i] = f
	}
	keys := make([]any, len(r.Keys))
	for i, k := range r.Keys {
		keys[i] = map[string]any{"file": k.File, "key": k.Key}
	}
	in := map[string]any{"connector": r.Connector, "repo": r.Repo, "commit": r.Commit, "files": files, "keys": keys}
	if r.Before != "" {
		in["before"] = r.Before
	}
	return &envelope.Job{V: envelope.Version, Run: ReadRunPrefix + r.ID, Pipeline: "_environments", Stage: ReadStage, Step: ReadStep,
		Type: steps.TypeReadReleaseValues, Pool: pool, Attempt: r.Attempt, Executor: "environments", Inputs: in, Connectors: []string{r.Connector}}
}

// readKeep is how long a read is kept in prflow-envs: an environment whose commit has not
// changed for longer is read once more when its record goes.
var readKeep = 7 * 24 * time.Hour

// pruneReads deletes the reads older than readKeep, so that the bucket (bounded in bytes)
// never fills up with them.
func (m *Model) pruneReads(ctx context.Context, now time.Time) {
	m.mu.Lock()
	var old []string
	for id, r := range m.reads {
		if now.Sub(r.Requested) > readKeep {
			old = append(old, id)
		}
	}
	m.mu.Unlock()
	for _, id := range old {
		if err := m.src.History.Delete(ctx, queue.EnvReadKey(id)); err != nil && ctx.Err() == nil {
			m.src.Log.Warn("environments: old read not deleted", "read", id, "err", err)
		}
	}
}

// ReadsDispatched is how many read jobs this model has sent (tests bound bursts with it).
func (m *Model) ReadsDispatched() int64 { return m.reqs.Load() }
