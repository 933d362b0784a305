package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines/policy"
)

// appWatch keeps the records of prflow-apps in memory for stage policies. A KV watcher
// delivers every record, then every change (deletes and purges too); the list handed to the
// policy engine is converted once per change, so a stage gate reads it without a round trip
// (ListKeys and a Get per app cost a gate 51 round trips with 50 apps).
//
// A gate never answers from a view it cannot trust: before the first watcher delivered every
// record it waits for them; while no watcher is caught up (it died, it is being reopened, or
// the connection dropped and came back, which can lose updates) it reads the bucket directly.
type appWatch struct {
	kv  jetstream.KeyValue
	nc  *nats.Conn
	log *slog.Logger
	// open starts a watcher of every key with its current value first (kv.WatchAll); tests
	// wrap it to delay or break the watcher.
	open  func(ctx context.Context, kv jetstream.KeyValue) (jetstream.KeyWatcher, error)
	retry time.Duration // first pause before a watcher that failed is opened again; doubles up to retryMax

	// inUse says whether a stage policy is loaded; once none is, the watcher stops until a
	// gate needs the records again.
	inUse    func() bool
	running  atomic.Bool // run is active (the controller runs)
	wantMu   sync.Mutex
	want     chan struct{} // closed by the gate (or Run) that needs the records first
	wanted   bool          // want is closed
	first    chan struct{} // closed once the first watcher caught up, or ended before it did
	firstOne sync.Once
	snap     atomic.Pointer[appSnapshot] // nil while no watcher is caught up
	restart  chan struct{}               // asks the current watcher to start over (after a reconnect)

	feed appFeed // the changes watchApps sees, for live run pages
}

// appSnapshot is every record of prflow-apps as of one watcher's last change.
type appSnapshot struct {
	list       any    // the records sorted by key, each with its "key", converted for the policy engine
	rev        uint64 // the highest revision seen
	reconnects uint64 // the connection's reconnect count when the watcher was opened
}

const retryMax = 5 * time.Second

// maxUnpublished bounds how many changes a snapshot may lag behind while changes keep coming.
const maxUnpublished = 64

// errUnused ends the watcher when no stage policy is loaded any more.
var errUnused = errors.New("no stage policy is loaded")

// errReconnected ends a watcher opened before the connection last reconnected: a disconnect
// may have lost updates it would never deliver.
var errReconnected = errors.New("the NATS connection reconnected since the watcher was opened")

func newAppWatch() *appWatch {
	return &appWatch{
		open: func(ctx context.Context, kv jetstream.KeyValue) (jetstream.KeyWatcher, error) {
			return kv.WatchAll(ctx)
		},
		inUse:   func() bool { return true },
		retry:   100 * time.Millisecond,
		want:    make(chan struct{}),
		first:   make(chan struct{}),
		restart: make(chan struct{}, 1),
	}
}

// need starts the watcher if it is not running yet (only stage policies use it).
func (a *appWatch) need() {
	a.wantMu.Lock()
	defer a.wantMu.Unlock()
	if !a.wanted {
		a.wanted = true
		close(a.want)
	}
}

// unneeded marks the records unneeded (the watcher stopped with no stage policy loaded) and
// returns the channel the next need closes.
func (a *appWatch) unneeded() <-chan struct{} {
	a.wantMu.Lock()
	defer a.wantMu.Unlock()
	a.want, a.wanted = make(chan struct{}), false
	return a.want
}

func (a *appWatch) wantCh() <-chan struct{} {
	a.wantMu.Lock()
	defer a.wantMu.Unlock()
	return a.want
}

func (a *appWatch) firstDone() { a.firstOne.Do(func() { close(a.first) }) }

func (a *appWatch) reconnects() uint64 { return a.nc.Stats().Reconnects }

// current is the snapshot a gate may use, or nil: none is caught up, the connection is down
// (updates are not arriving), or it reconnected since the watcher was opened (the watcher is
// asked to start over).
func (a *appWatch) current() *appSnapshot {
	s := a.snap.Load()
	if s == nil {
		return nil
	}
	if a.reconnects() != s.reconnects {
		select {
		case a.restart <- struct{}{}:
		default:
		}
		return nil
	}
	if a.nc.Status() != nats.CONNECTED {
		return nil
	}
	return s
}

// run keeps a caught-up watcher of prflow-apps from the first need until ctx ends, opening a
// new one whenever one ends. Run marks it running before it starts it, so that a gate in
// between waits for the watcher instead of reading the bucket.
func (a *appWatch) run(ctx context.Context) {
	defer a.running.Store(false)
	want := a.wantCh()
	delay := a.retry
	for {
		select {
		case <-want:
		case <-ctx.Done():
			return
		}
		// When follow returns its snapshot is gone: gates, including those waiting for the
		// first watcher, read the bucket directly until a new one has caught up.
		caught, err := a.follow(ctx)
		a.firstDone()
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errUnused) {
			a.log.Info("prflow-apps watcher stopped: no stage policy is loaded")
			want, delay = a.unneeded(), a.retry
			if a.inUse() {
				a.need() // a stage policy came back meanwhile; its gate's need may have come too early
			}
			continue
		}
		if caught {
			delay = a.retry
		}
		a.log.Warn("prflow-apps watcher ended; stage gates read the bucket directly until a new one has caught up",
			"err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		if !caught {
			delay = min(2*delay, retryMax)
		}
	}
}

// follow opens a watcher and applies what it delivers until it ends, publishing a snapshot
// once it delivered every current record and after each change from then on. caught says
// whether it got that far.
func (a *appWatch) follow(ctx context.Context) (caught bool, err error) {
	gen := a.reconnects() // before opening: a reconnect in between only causes one more restart
	w, err := a.open(ctx, a.kv)
	if err != nil {
		return false, fmt.Errorf("watch %s: %w", a.kv.Bucket(), err)
	}
	defer func() {
		a.snap.Store(nil) // before the watcher stops: no gate reads a stopped watcher's records
		_ = w.Stop()
	}()
	recs := map[string]any{}
	var rev uint64
	unpublished := 0 // changes taken in since the last snapshot
	updates := w.Updates()
	// Gates ask for a new watcher when they see a reconnect; the ticker finds one when no gate
	// comes, so the next gate need not read the bucket. It also stops the watcher once no
	// stage policy is loaded.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return caught, ctx.Err()
		case <-a.restart:
			if a.reconnects() != gen {
				return caught, errReconnected
			}
			// A request from before this watcher was opened.
		case <-tick.C:
			if a.reconnects() != gen {
				return caught, errReconnected
			}
			if !a.inUse() {
				return caught, errUnused
			}
		case e, ok := <-updates:
			if !ok {
				return caught, fmt.Errorf("watch %s: the watcher stopped", a.kv.Bucket())
			}
			if e == nil { // every current record delivered
				caught = true
			} else {
				rev = max(rev, e.Revision())
				a.apply(recs, e)
				unpublished++
			}
			// Publish once the watcher is caught up and nothing more is already queued (a
			// burst of changes is converted once), or after many changes in a steady stream.
			if caught && (len(updates) == 0 || unpublished >= maxUnpublished) {
				a.snap.Store(&appSnapshot{list: appRecords(recs), rev: rev, reconnects: gen})
				a.firstDone()
				unpublished = 0
			}
		}
	}
}

// apply takes one watcher entry into recs (key → converted record).
func (a *appWatch) apply(recs map[string]any, e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		delete(recs, e.Key())
		return
	}
	var m map[string]any
	if err := json.Unmarshal(e.Value(), &m); err != nil || m == nil {
		// An agent writes JSON objects; anything else is left out, as a direct read does.
		a.log.Warn("stage policies: app status record is not a JSON object; left out", "key", e.Key(), "revision", e.Revision(), "err", err)
		delete(recs, e.Key())
		return
	}
	if agent.Tombstone(m) {
		delete(recs, e.Key()) // a deleted app: no app, as when its record is gone
		return
	}
	m["key"] = e.Key()
	recs[e.Key()] = policy.Converted(m)
}

// appRecords is recs as one list sorted by key, converted for the policy engine.
func appRecords(recs map[string]any) any {
	vals := make([]any, 0, len(recs))
	for _, k := range slices.Sorted(maps.Keys(recs)) {
		vals = append(vals, recs[k])
	}
	return policy.Converted(vals)
}

// stageApps is input.apps for a stage gate: the watcher's snapshot when one is caught up,
// else the bucket read directly. Before the first watcher delivered every record it waits
// for them, up to ctx's deadline: an empty list would read as "no app status known".
func (c *Controller) stageApps(ctx context.Context) (any, error) {
	a := c.apps
	if !a.running.Load() {
		return c.appStatuses(ctx) // Run is not running (or has ended): nothing watches
	}
	a.need()
	select {
	case <-a.first:
	case <-ctx.Done():
		return nil, fmt.Errorf("%s watcher has not delivered the current records: %w", a.kv.Bucket(), ctx.Err())
	}
	if s := a.current(); s != nil {
		return s.list, nil
	}
	return c.appStatuses(ctx)
}

// appFeed fans the controller's one watch of prflow-apps (watchApps) out to live run pages,
// so that an open page costs a channel rather than a watch (a consumer on the server, its
// goroutines and buffers) of its own. Each subscriber says which keys it shows; a change of
// another key is not queued for it. A subscriber that does not keep up is never waited for:
// its change is dropped and it is told to re-read instead (Resync), as it is after the
// connection to NATS came back, when changes may have been missed.
type appFeed struct {
	mu      sync.RWMutex
	subs    map[*AppSub]struct{}
	watchMu sync.Mutex
	watched bool // the reconnect watch runs
}

// appSubBuffer is how many changes a subscriber may have queued before it must resync.
const appSubBuffer = 8

// AppSub is one subscriber of the app status changes (a live run page).
type AppSub struct {
	feed    *appFeed
	mu      sync.Mutex
	keys    map[string]bool
	changes chan string
	resync  chan struct{}
}

// SubscribeApps subscribes to changes of prflow-apps records; Close ends it. It reports the
// changes watchApps sees, so it needs Run.
func (c *Controller) SubscribeApps() *AppSub {
	f := &c.apps.feed
	s := &AppSub{feed: f, changes: make(chan string, appSubBuffer), resync: make(chan struct{}, 1)}
	f.mu.Lock()
	if f.subs == nil {
		f.subs = map[*AppSub]struct{}{}
	}
	f.subs[s] = struct{}{}
	f.mu.Unlock()
	f.watchReconnects(c.apps.nc, c.log)
	return s
}

// AppSubscribers is how many subscribers there are (for tests and status).
func (c *Controller) AppSubscribers() int {
	c.apps.feed.mu.RLock()
	defer c.apps.feed.mu.RUnlock()
	return len(c.apps.feed.subs)
}

// SetKeys sets the prflow-apps keys s wants changes of.
func (s *AppSub) SetKeys(keys map[string]bool) {
	s.mu.Lock()
	s.keys = keys
	s.mu.Unlock()
}

// Changes delivers the keys that changed.
func (s *AppSub) Changes() <-chan string { return s.changes }

// Resync is signalled when changes were dropped (s did not keep up, or the connection to
// NATS came back): the subscriber re-reads what it shows.
func (s *AppSub) Resync() <-chan struct{} { return s.resync }

// Close ends the subscription; calling it again is fine.
func (s *AppSub) Close() {
	s.feed.mu.Lock()
	delete(s.feed.subs, s)
	s.feed.mu.Unlock()
}

func (s *AppSub) signal() {
	select {
	case s.resync <- struct{}{}:
	default: // one is pending already
	}
}

// publish hands a changed key to the subscribers that want it, never blocking.
func (f *appFeed) publish(key string) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for s := range f.subs {
		s.mu.Lock()
		want := s.keys[key]
		s.mu.Unlock()
		if !want {
			continue
		}
		select {
		case s.changes <- key:
		default:
			s.signal() // full: it re-reads everything once it gets to it
		}
	}
}

func (f *appFeed) resyncAll() {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for s := range f.subs {
		s.signal()
	}
}

// watchReconnects tells every subscriber to resync whenever the connection to NATS comes
// back: changes made while it was down may reach the watch late or, for a watch that had
// to be opened again, not as changes. One goroutine per process, from the first subscriber
// until the connection is closed.
func (f *appFeed) watchReconnects(nc *nats.Conn, log *slog.Logger) {
	f.watchMu.Lock()
	defer f.watchMu.Unlock()
	if f.watched || nc == nil {
		return
	}
	f.watched = true
	ch := nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	go func() {
		for st := range ch {
			if st == nats.CLOSED {
				return
			}
			if log != nil {
				log.Info("NATS connection back: live pages re-read the app status they show")
			}
			f.resyncAll()
		}
	}()
}
