package environments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// Sources are where a Model reads from. Every field but Log is required.
type Sources struct {
	JS jetstream.JetStream
	// Runs, Apps, Agents and History are the prflow-runs, prflow-apps, prflow-agents and
	// prflow-envs buckets.
	Runs, Apps, Agents, History jetstream.KeyValue
	// Pipeline loads the stored pipeline a run was started from (its Spec hash).
	Pipeline func(ctx context.Context, spec string) (*pipelines.Pipeline, error)
	// Triggers are the pipelines the server has loaded (they may have no run yet).
	Triggers func() []*pipelines.Pipeline
	// View says whether an agent's records are current (agent.Client.View).
	View func(ctx context.Context, agent string) agent.View
	// LoadEvent loads a webhook event that was too large for its message (scm.Event.StoredAs).
	LoadEvent func(ctx context.Context, ev *scm.Event) error
	// Dispatch sends a job to the workers (the controller's dispatch, which signs it); nil:
	// the model reads no release values (they stay unknown after a hand commit).
	Dispatch func(ctx context.Context, j *envelope.Job) error
	// Registry says which pool runs the read jobs (nil: the default pool).
	Registry *steps.Registry
	Log      *slog.Logger
}

// Model is the environments model of one controller: it watches the buckets and the push
// events and rebuilds the environments in memory when they change (coalesced). Reads never
// touch NATS. Every controller replica runs its own; they share the history bucket.
type Model struct {
	src   Sources
	snap  atomic.Pointer[built]
	ready chan struct{}
	nudge chan struct{}

	subMu sync.Mutex
	subs  map[chan struct{}]struct{}

	mu       sync.Mutex // guards what the watchers fill in
	runs     map[string]runEntry
	specs    map[string][]envDecl // spec hash → environments
	pipeEnvs map[string]bool      // pipeline → whether its last run seen has environments
	apps     map[string]*agent.AppStatus
	views    map[string]agent.View
	pushes   []pushEvent
	stored   map[string][]Promotion // prflow-envs, by environment
	marks    *marks
	written  map[string]string      // run/stage → the entry this replica last wrote or saw stored
	reads    map[string]*readRecord // prflow-envs read.<id>, by id
	lastJSON []byte

	dueMu sync.Mutex
	due   map[string]*dueBranch // release branch → the reads it waits to send
	reqs  atomic.Int64
}

type runEntry struct {
	pipeline, spec string
	created        time.Time
	facts          []stageFacts
}

// maxPushes bounds the push events kept in memory (the newest are kept).
const maxPushes = 5000

// Rebuild pacing: a change is built at most this long after it arrived, and builds are at
// least this far apart, however fast changes come.
const coalesce = 50 * time.Millisecond

// A rebuild reads every run's facts, so its cost grows with the runs kept: builds are also at
// least rebuildSpacing times the last one's duration apart (at most maxRebuildGap), so that
// under a burst of changes they take about a quarter of the time, not most of a core (22 % of
// the process's CPU while 5,000 runs started, in BenchmarkParkedGitOpsSync).
const (
	rebuildSpacing = 4
	maxRebuildGap  = 10 * time.Second
)

// rebuildHook, when set (tests), runs at the start of every rebuild.
var rebuildHook func()

// viewEvery is how often the agents' views are read again: registrations expire without
// an event (the bucket's TTL), so an agent going silent is noticed by asking.
var viewEvery = 2 * time.Second

// New returns a model reading from src; Run fills it.
func New(src Sources) *Model {
	if src.Log == nil {
		src.Log = slog.Default()
	}
	return &Model{src: src, ready: make(chan struct{}), nudge: make(chan struct{}, 1), subs: map[chan struct{}]struct{}{},
		runs: map[string]runEntry{}, specs: map[string][]envDecl{}, pipeEnvs: map[string]bool{}, apps: map[string]*agent.AppStatus{}, views: map[string]agent.View{},
		stored: map[string][]Promotion{}, marks: newMarks(), written: map[string]string{}, reads: map[string]*readRecord{}, due: map[string]*dueBranch{}}
}

// Ready is closed once the model has read every bucket and push event there was at start.
func (m *Model) Ready() <-chan struct{} { return m.ready }

// Nudge asks for a rebuild (the server's pipelines changed).
func (m *Model) Nudge() {
	if m == nil {
		return
	}
	select {
	case m.nudge <- struct{}{}:
	default:
	}
}

// Run watches until ctx ends.
func (m *Model) Run(ctx context.Context) error {
	type watch struct {
		kv    jetstream.KeyValue
		apply func(context.Context, jetstream.KeyValueEntry) bool // whether it may change the environments
	}
	watches := []watch{{m.src.Runs, m.applyRun}, {m.src.Apps, m.applyApp}, {m.src.Agents, m.applyAgent}, {m.src.History, m.applyHistory}}
	var wg sync.WaitGroup
	var pending sync.WaitGroup
	for _, w := range watches {
		kw, err := w.kv.WatchAll(ctx)
		if err != nil {
			return fmt.Errorf("environments: watch %s: %w", w.kv.Bucket(), err)
		}
		pending.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { _ = kw.Stop() }()
			replayed := false
			for e := range kw.Updates() {
				if e == nil {
					if !replayed {
						replayed = true
						pending.Done()
					}
					continue
				}
				if w.apply(ctx, e) && replayed {
					m.Nudge()
				}
			}
			if !replayed {
				pending.Done()
			}
		}()
	}
	pending.Add(1)
	wg.Add(1)
	go func() { defer wg.Done(); m.consumePushes(ctx, pending.Done) }()

	replayed := make(chan struct{})
	go func() { pending.Wait(); close(replayed) }()
	select {
	case <-replayed:
	case <-ctx.Done():
		wg.Wait()
		return nil
	}
	m.refreshViews(ctx)
	m.rebuild(ctx)
	close(m.ready)

	views := time.NewTicker(viewEvery)
	defer views.Stop()
	reads := time.NewTicker(readTick)
	defer reads.Stop()
	pruned := time.Now()
	last := time.Now()
	var cost time.Duration // of the last rebuild
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-views.C:
			m.refreshViews(ctx) // nudges when a view changed
			continue
		case now := <-reads.C:
			m.sendReads(ctx, now)
			if now.Sub(pruned) > time.Minute {
				pruned = now
				m.pruneReads(ctx, now)
			}
			continue
		case <-m.nudge:
		}
		if wait := max(coalesce, min(rebuildSpacing*cost, maxRebuildGap)) - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				continue
			case <-time.After(wait):
			}
		}
		last = time.Now()
		m.rebuild(ctx)
		cost = time.Since(last)
	}
}

func (m *Model) applyRun(ctx context.Context, e jetstream.KeyValueEntry) bool {
	id := e.Key()
	if e.Operation() != jetstream.KeyValuePut {
		m.mu.Lock()
		_, had := m.runs[id]
		delete(m.runs, id)
		m.mu.Unlock()
		return had
	}
	m.mu.Lock()
	known, seen := m.runs[id]
	decls, declsKnown := m.specs[known.spec]
	m.mu.Unlock()
	if seen && declsKnown && len(decls) == 0 && len(known.facts) == 0 {
		// A run's spec never changes and its pipeline declares no environments: this revision
		// changes nothing here, so it is not decoded (most runs under load; decoding every
		// revision of every run was 13 % of the whole path's CPU).
		return false
	}
	var head struct {
		Spec     string    `json:"spec"`
		Pipeline string    `json:"pipeline"`
		Created  time.Time `json:"created"`
	}
	if err := json.Unmarshal(e.Value(), &head); err != nil || head.Spec == "" {
		return false
	}
	decls, p, err := m.declsOf(ctx, head.Spec)
	if err != nil {
		m.src.Log.Warn("environments: pipeline of run not readable", "run", id, "spec", head.Spec, "err", err)
		return false
	}
	re := runEntry{pipeline: head.Pipeline, spec: head.Spec, created: head.Created}
	if len(decls) > 0 {
		var r pipelines.Run
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			m.src.Log.Warn("environments: run state not readable", "run", id, "err", err)
			return false
		}
		re.facts = runFacts(&r, p)
	}
	m.mu.Lock()
	prev := m.runs[id]
	m.runs[id] = re
	hadEnvs := m.pipeEnvs[head.Pipeline]
	m.pipeEnvs[head.Pipeline] = len(decls) > 0
	m.mu.Unlock()
	// A run of a pipeline without environments changes nothing here (most runs, under load),
	// unless its pipeline had environments before (they may be gone now).
	return len(decls) > 0 || len(prev.facts) > 0 || hadEnvs
}

// declsOf returns the environments of a stored pipeline (read once per spec hash).
func (m *Model) declsOf(ctx context.Context, spec string) ([]envDecl, *pipelines.Pipeline, error) {
	m.mu.Lock()
	d, ok := m.specs[spec]
	m.mu.Unlock()
	p, err := m.src.Pipeline(ctx, spec) // the controller caches loaded pipelines
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		d = declared(p)
		m.mu.Lock()
		m.specs[spec] = d
		m.mu.Unlock()
	}
	return d, p, nil
}

func (m *Model) applyApp(_ context.Context, e jetstream.KeyValueEntry) bool {
	var st agent.AppStatus
	gone := e.Operation() != jetstream.KeyValuePut || agent.DecodeStatus(e.Value(), &st) != nil || st.Gone()
	m.mu.Lock()
	defer m.mu.Unlock()
	if gone {
		delete(m.apps, e.Key())
		return true
	}
	m.apps[e.Key()] = &st
	return true
}

func (m *Model) applyAgent(ctx context.Context, e jetstream.KeyValueEntry) bool {
	var r agent.Registration
	if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &r) != nil || r.Agent == "" {
		return false // a removed registration: the next view refresh tells
	}
	v := m.src.View(ctx, r.Agent)
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.views[r.Agent]
	m.views[r.Agent] = v
	return !ok || old != v
}

// refreshViews reads the view of every agent an app record or a pipeline names.
func (m *Model) refreshViews(ctx context.Context) {
	m.mu.Lock()
	names := map[string]bool{}
	for _, st := range m.apps {
		names[st.Agent] = true
	}
	for _, ds := range m.specs {
		for _, d := range ds {
			for _, c := range d.clusters {
				names[c.Agent] = true
			}
		}
	}
	m.mu.Unlock()
	for _, p := range m.triggers() {
		for _, e := range p.Environments {
			for _, c := range e.Clusters {
				names[c.Agent] = true
			}
		}
	}
	got := map[string]agent.View{}
	for n := range names {
		if n != "" && ctx.Err() == nil {
			got[n] = m.src.View(ctx, n)
		}
	}
	m.mu.Lock()
	changed := false
	for n, v := range got {
		if m.views[n] != v {
			changed = true
		}
		m.views[n] = v
	}
	m.mu.Unlock()
	if changed {
		m.Nudge()
	}
}

func (m *Model) triggers() []*pipelines.Pipeline {
	if m.src.Triggers == nil {
		return nil
	}
	return m.src.Triggers()
}

// consumePushes reads the push events of PRFLOW_SCM from the start of the stream (its age
// limit bounds them), calling caughtUp once it has read those there were at start.
//
// It reads through one ordered consumer's message iterator. Calling Next on the ordered
// consumer itself would create a new server-side consumer for every read (once a second while
// idle), and its reset retries without end once the connection is closed, so a controller
// stopped after its connection hung in it. The iterator is stopped when ctx ends, which also
// ends such a retry; after any other failure it is opened again after the last push read.
func (m *Model) consumePushes(ctx context.Context, caughtUp func()) {
	once := sync.OnceFunc(caughtUp)
	defer once()
	var last uint64 // stream sequence of the last event read
	for ctx.Err() == nil {
		err := m.readPushes(ctx, &last, once)
		if ctx.Err() != nil {
			return
		}
		m.src.Log.Warn("environments: read push events", "err", err)
		select { // not a busy loop while NATS is away
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// readPushes reads push events after stream sequence *last until ctx ends or the read fails.
func (m *Model) readPushes(ctx context.Context, last *uint64, caughtUp func()) error {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{queue.SCMSubject("*", string(scm.EventPush))}}
	if *last > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, *last+1
	}
	oc, err := m.src.JS.OrderedConsumer(ctx, queue.StreamSCM, cfg)
	if err != nil {
		return err
	}
	if info, err := oc.Info(ctx); err == nil && info.NumPending == 0 {
		caughtUp()
	}
	it, err := oc.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	for ctx.Err() == nil {
		// The read ends with ctx too: a stopping controller does not wait out the second.
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		msg, err := it.Next(jetstream.NextContext(fctx))
		cancel()
		if err != nil {
			if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				caughtUp()
				continue
			}
			return err
		}
		md, err := msg.Metadata()
		if err == nil {
			*last = md.Sequence.Stream
		}
		var ev scm.Event
		if json.Unmarshal(msg.Data(), &ev) == nil && ev.Kind == scm.EventPush && !ev.Deleted {
			if ev.StoredAs != "" && m.src.LoadEvent != nil {
				if err := m.src.LoadEvent(ctx, &ev); err != nil {
					m.src.Log.Warn("environments: push event not loaded", "delivery", ev.DeliveryID, "err", err)
				}
			}
			m.mu.Lock()
			m.pushes = append(m.pushes, pushEvent{repo: string(ev.Repo), branch: ev.Branch, before: ev.Before, after: ev.After,
				sender: ev.Sender, at: ev.Received, files: ev.Changed, incomplete: ev.ChangedIncomplete})
			if len(m.pushes) > maxPushes {
				m.pushes = slices.Delete(m.pushes, 0, len(m.pushes)-maxPushes)
			}
			m.mu.Unlock()
			m.Nudge()
		}
		if err == nil && md.NumPending == 0 {
			caughtUp()
		}
	}
	return ctx.Err()
}

// rebuild builds the environments from what the watchers hold, stores the history entries
// that changed and tells subscribers when anything changed.
func (m *Model) rebuild(ctx context.Context) {
	if rebuildHook != nil {
		rebuildHook()
	}
	m.mu.Lock()
	in := &inputs{decls: map[string][]envDecl{}, facts: map[string][]stageFacts{}, apps: m.apps, views: m.views, pushes: m.pushes, reads: m.reads}
	newest := map[string]runEntry{}
	for id, r := range m.runs {
		if n, ok := newest[r.pipeline]; !ok || r.created.After(n.created) {
			newest[r.pipeline] = r
		}
		if len(r.facts) > 0 {
			in.facts[id] = r.facts
		}
	}
	for name, r := range newest {
		in.decls[name] = m.specs[r.spec]
	}
	for _, p := range m.triggers() {
		in.decls[p.Name] = declared(p) // the server's version of a pipeline wins over old runs'
	}
	now := time.Now()
	b := build(in, m.marks, now)
	dirty := map[string][]Promotion{}
	for env, h := range b.history {
		for _, p := range h {
			enc, _ := json.Marshal(p)
			if m.written[p.Run+"/"+p.Stage] != string(enc) {
				dirty[env] = append(dirty[env], p)
			}
		}
	}
	enc, _ := json.Marshal(b.envs)
	if b.envs == nil {
		enc = []byte("[]")
	}
	b.json = enc
	same := string(enc) == string(m.lastJSON)
	m.lastJSON = enc
	m.mu.Unlock()

	// Readers get the new state first; the history is stored after (it is served from the
	// build meanwhile, see History).
	m.snap.Store(b)
	m.want(b.wants, now)
	if !same || len(dirty) > 0 {
		m.notify()
	}
	for env, ps := range dirty {
		if err := m.store(ctx, env, ps); err != nil {
			if ctx.Err() == nil {
				m.src.Log.Warn("environments: history not stored; will try again on the next change", "environment", env, "err", err)
			}
			continue
		}
		m.mu.Lock()
		for _, p := range ps {
			enc, _ := json.Marshal(p)
			m.written[p.Run+"/"+p.Stage] = string(enc)
		}
		m.mu.Unlock()
	}
}

func (m *Model) notify() {
	m.subMu.Lock()
	defer m.subMu.Unlock()
	for ch := range m.subs {
		select {
		case ch <- struct{}{}:
		default: // one pending notice is enough: the reader reads the newest state
		}
	}
}

// Changed implements Reader.
func (m *Model) Changed() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	m.subMu.Lock()
	m.subs[ch] = struct{}{}
	m.subMu.Unlock()
	return ch, sync.OnceFunc(func() {
		m.subMu.Lock()
		delete(m.subs, ch)
		m.subMu.Unlock()
	})
}

// current waits for the first build.
func (m *Model) current(ctx context.Context) (*built, error) {
	select {
	case <-m.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("environments model still loading: %w", ctx.Err())
	}
	return m.snap.Load(), nil
}

// List implements Reader. The environments are shared: callers must not change them.
func (m *Model) List(ctx context.Context) ([]Environment, error) {
	b, err := m.current(ctx)
	if err != nil {
		return nil, err
	}
	return slices.Clone(b.envs), nil
}

// ListJSON is List as a JSON array, encoded once per change rather than once per request.
// The bytes are shared: callers must not change them.
func (m *Model) ListJSON(ctx context.Context) ([]byte, error) {
	b, err := m.current(ctx)
	if err != nil {
		return nil, err
	}
	return b.json, nil
}

// Get implements Reader.
func (m *Model) Get(ctx context.Context, name string) (*Environment, error) {
	b, err := m.current(ctx)
	if err != nil {
		return nil, err
	}
	i, ok := b.byName[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q (no pipeline declares it and no agent reports an app of it)", ErrNotFound, name)
	}
	e := b.envs[i]
	return &e, nil
}

// History implements Reader: the stored entries, with those this replica has built but not
// yet seen back from the bucket.
func (m *Model) History(ctx context.Context, name string, limit int) ([]Promotion, error) {
	b, err := m.current(ctx)
	if err != nil {
		return nil, err
	}
	if _, ok := b.byName[name]; !ok {
		return nil, fmt.Errorf("%w: %q (no pipeline declares it and no agent reports an app of it)", ErrNotFound, name)
	}
	m.mu.Lock()
	stored := m.stored[name]
	m.mu.Unlock()
	out := merge(stored, b.history[name])
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

var _ Reader = (*Model)(nil)
