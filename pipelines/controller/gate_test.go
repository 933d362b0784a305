package controller

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/prflow/prflow/pipelines/policy"
)

// The example stage policy's answers for the prod stage.
const (
	msgDegraded  = "staging app web-staging is Degraded, not Healthy"
	msgNoStaging = "no staging app status is known: prod waits for a Healthy staging"
)

// deny asks the gate whether stage si may start.
func (e *gateEnv) deny(si int) []string {
	deny, _ := e.gate.StageAllowed(e.run, si)
	return deny
}

// wantDeny fails unless the prod gate answers exactly want (nil: allowed).
func (e *gateEnv) wantDeny(why string, want ...string) {
	e.t.Helper()
	if got := e.deny(prodStage); !slices.Equal(got, want) {
		e.t.Fatalf("%s: prod gate said %q, want %q", why, got, want)
	}
}

// seen waits until the controller's watcher has a snapshot with revision rev.
func (e *gateEnv) seen(rev uint64) {
	e.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if s := e.ctl.apps.current(); s != nil && s.rev >= rev {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the prflow-apps watcher did not catch up with revision %d in 10s", rev)
		}
	}
}

// lastRev is the revision of the last change of prflow-apps (puts, deletes and purges).
func (e *gateEnv) lastRev() uint64 {
	e.t.Helper()
	st, err := e.apps.Status(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
}

// sent counts the messages the controller's connection sent (requests to NATS included).
func (e *gateEnv) sent() uint64 { return e.ctl.conn.NC.Stats().OutMsgs }

// watchHook wraps the controller's real prflow-apps watchers: it can hold back what they
// deliver, stop the current one as a closed subscription does, and make opening one fail.
type watchHook struct {
	mu      sync.Mutex
	fail    bool
	hold    chan struct{} // non-nil: deliveries wait until it is closed
	current *heldWatcher
	opened  int
}

func (h *watchHook) option() Option {
	return func(c *Controller) { c.apps.open, c.apps.retry = h.open, 10*time.Millisecond }
}

func (h *watchHook) open(ctx context.Context, kv jetstream.KeyValue) (jetstream.KeyWatcher, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opened++
	if h.fail {
		return nil, errors.New("test: watcher refused")
	}
	inner, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, err
	}
	w := &heldWatcher{inner: inner, out: make(chan jetstream.KeyValueEntry, 256), done: make(chan struct{})}
	go w.forward(h.hold)
	h.current = w
	return w, nil
}

func (h *watchHook) set(fail bool, hold chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fail, h.hold = fail, hold
}

// kill stops the current watcher: its updates channel closes, as when NATS closes the
// subscription.
func (h *watchHook) kill() {
	h.mu.Lock()
	defer h.mu.Unlock()
	_ = h.current.Stop()
}

type heldWatcher struct {
	inner    jetstream.KeyWatcher
	out      chan jetstream.KeyValueEntry
	done     chan struct{}
	stopOnce sync.Once
}

func (w *heldWatcher) forward(hold chan struct{}) {
	defer close(w.out)
	if hold != nil {
		select {
		case <-hold:
		case <-w.done:
			return
		}
	}
	for e := range w.inner.Updates() {
		select {
		case w.out <- e:
		case <-w.done:
			return
		}
	}
}

func (w *heldWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.out }

func (w *heldWatcher) Stop() error {
	w.stopOnce.Do(func() { close(w.done) })
	return w.inner.Stop()
}

// TestStageGateFollowsAppStatus: a change written to prflow-apps (a put, a delete, a purge)
// is what the next gate sees once the watcher delivered it, and the gate reads it from
// memory: no request per gate (it was a ListKeys and a Get per app).
func TestStageGateFollowsAppStatus(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t, false)
	e.put("web-staging", "staging-eu", "Healthy")
	for i := range 10 {
		e.put(fmt.Sprintf("web-dev-%d", i), "dev-eu", "Degraded") // not staging: no effect on prod
	}
	e.start()
	e.wantDeny("staging Healthy")

	e.seen(e.put("web-staging", "staging-eu", "Degraded"))
	e.wantDeny("staging turned Degraded", msgDegraded)
	if deny := e.deny(1); len(deny) > 0 {
		t.Fatalf("the staging stage is not checked by the example policy, got %q", deny)
	}

	e.seen(e.put("web-staging", "staging-eu", "Healthy"))
	e.wantDeny("staging back to Healthy")

	e.seen(e.put("web-staging-2", "staging-eu", "Progressing"))
	e.wantDeny("a second staging app Progressing", "staging app web-staging-2 is Progressing, not Healthy")
	if err := e.apps.Delete(context.Background(), "sim.web-staging-2"); err != nil {
		t.Fatal(err)
	}
	e.seen(e.lastRev())
	e.wantDeny("the second staging app deleted")

	if err := e.apps.Purge(context.Background(), "sim.web-staging"); err != nil {
		t.Fatal(err)
	}
	e.seen(e.lastRev())
	e.wantDeny("the last staging app purged", msgNoStaging)

	e.seen(e.put("web-staging", "staging-eu", "Healthy"))
	before := e.sent()
	for range 20 {
		e.wantDeny("staging Healthy again")
	}
	if n := e.sent() - before; n > 5 { // a pull request or a heartbeat reply of another consumer may fall in
		t.Fatalf("20 gates sent %d messages; the app records should come from memory", n)
	}
}

// TestStageGateSeesRecordsFromBeforeStart: a gate right after the controller started answers
// on the records that were in prflow-apps before, even while the watcher has not delivered
// them yet (it waits, bounded by policyTimeout, and then denies with why); never on an
// empty list.
func TestStageGateSeesRecordsFromBeforeStart(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t, false)
	for i := range 30 {
		e.put(fmt.Sprintf("web-prod-%d", i), "prod-eu", "Healthy")
	}
	e.put("web-staging", "staging-eu", "Degraded")
	hold := make(chan struct{})
	h := &watchHook{hold: hold}
	e.start(h.option())

	got := make(chan []string, 1)
	go func() { got <- e.deny(prodStage) }()
	time.Sleep(300 * time.Millisecond) // the gate is asked while the initial records are held back
	close(hold)
	if deny := <-got; !slices.Equal(deny, []string{msgDegraded}) {
		t.Fatalf("first gate: %q, want %q", deny, msgDegraded)
	}

	// A fresh controller whose watcher never delivers: the gate denies once policyTimeout
	// ends, saying why, and answers once the records come.
	e2 := newGateEnv(t, false)
	e2.put("web-staging", "staging-eu", "Healthy")
	hold2 := make(chan struct{})
	h2 := &watchHook{hold: hold2}
	e2.start(h2.option())
	start := time.Now()
	deny := e2.deny(prodStage)
	if len(deny) != 1 || !strings.Contains(deny[0], "prflow-apps watcher has not delivered the current records") {
		t.Fatalf("gate with no records delivered: %q", deny)
	}
	if waited := time.Since(start); waited < policyTimeout {
		t.Fatalf("gave up after %v, before policyTimeout (%v)", waited, policyTimeout)
	}
	close(hold2)
	e2.wantDeny("records delivered")
}

// TestStageGateWatcherDies: when the watcher dies the gate does not answer from what it had:
// it reads the bucket until a new watcher (opened again with backoff) has caught up.
func TestStageGateWatcherDies(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t, false)
	e.put("web-staging", "staging-eu", "Healthy")
	h := &watchHook{}
	e.start(h.option())
	e.wantDeny("staging Healthy")

	h.set(true, nil) // new watchers cannot be opened for now
	h.kill()
	e.put("web-staging", "staging-eu", "Degraded")
	var last []string
	eventually(t, 10*time.Second, func() bool { last = e.deny(prodStage); return slices.Equal(last, []string{msgDegraded}) },
		func() string { return fmt.Sprintf("with its watcher dead the gate still says %q", last) })
	h.mu.Lock()
	failed := h.opened
	h.mu.Unlock()
	eventually(t, 10*time.Second, func() bool { h.mu.Lock(); defer h.mu.Unlock(); return h.opened >= failed+2 },
		func() string { return "the watcher is not opened again" })
	e.wantDeny("still no watcher", msgDegraded)

	h.set(false, nil)
	e.seen(e.lastRev())
	// The count is of the whole connection, so a message of the controller's own background
	// work (a lease renewal, a watcher's flow control) can land in the window: a gate that
	// reads the bucket sends more on every try, so one quiet try of three shows it does not.
	var sent []uint64
	for range 3 {
		before := e.sent()
		e.wantDeny("from the new watcher", msgDegraded)
		if sent = append(sent, e.sent()-before); sent[len(sent)-1] <= 2 {
			break
		}
	}
	if n := sent[len(sent)-1]; n > 2 {
		t.Fatalf("a gate sent %v messages in three tries with a watcher caught up", sent)
	}
	e.seen(e.put("web-staging", "staging-eu", "Healthy"))
	e.wantDeny("staging back to Healthy")
}

// TestStageGateAfterServerRestart: the NATS server restarts (its watcher consumers are gone
// and the controller's old watcher gets nothing until the client notices); a change written
// after the controller reconnected is what the next gate sees.
func TestStageGateAfterServerRestart(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t, true)
	e.put("web-staging", "staging-eu", "Healthy")
	e.start()
	e.wantDeny("staging Healthy")

	e.restartServer()
	rev := e.putAfterRestart("sim.web-staging", `{"name":"web-staging","cluster":"staging-eu","health":"Degraded","labels":{"harness.io/envRef":"staging"}}`)
	// Far longer than a live watcher takes to deliver, far shorter than the client takes to
	// notice that its watcher's consumer is gone (missed heartbeats, seconds).
	time.Sleep(300 * time.Millisecond)
	e.wantDeny("staging turned Degraded after the restart", msgDegraded)

	e.seen(rev)
	e.wantDeny("from a new watcher", msgDegraded)
	e.seen(e.put("web-staging", "staging-eu", "Healthy"))
	e.wantDeny("staging back to Healthy")
}

// TestStageGateConcurrentWithChanges: gates on many goroutines while an agent flips staging's
// health: every answer is one the policy gives on a real state (never the empty list's), and
// once the last change is seen every gate agrees with it.
func TestStageGateConcurrentWithChanges(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t, false)
	e.put("web-staging", "staging-eu", "Healthy")
	e.start()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	bad := make(chan string, 8)
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if d := e.deny(prodStage); len(d) > 0 && !slices.Equal(d, []string{msgDegraded}) {
					select {
					case bad <- strings.Join(d, "; "):
					default:
					}
					return
				}
			}
		})
	}
	var rev uint64
	for i := range 60 {
		rev = e.put("web-staging", "staging-eu", []string{"Healthy", "Degraded"}[i%2])
	}
	e.seen(rev)
	close(stop)
	wg.Wait()
	close(bad)
	for d := range bad {
		t.Errorf("a gate answered on no real state: %q", d)
	}
	e.wantDeny("after the last change (Degraded)", msgDegraded)
}

// TestStageGateUnreadableRecords: a record that is not a JSON object is left out (and
// logged), as the direct read does; the others still decide.
func TestStageGateUnreadableRecords(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t, false)
	ctx := context.Background()
	e.put("web-staging", "staging-eu", "Healthy")
	for k, v := range map[string]string{"sim.garbage": "{not json", "sim.list": "[1,2]", "sim.null": "null", "sim.string": `"Degraded"`} {
		if _, err := e.apps.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	e.start()
	e.wantDeny("staging Healthy next to unreadable records")
	direct, err := e.ctl.appStatuses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.seen(e.lastRev())
	if got, want := recordKeys(t, e.ctl.apps.current().list), recordKeys(t, direct); !slices.Equal(got, want) || len(got) != 1 {
		t.Fatalf("records from the watcher %q, from a direct read %q; want only sim.web-staging", got, want)
	}
	e.seen(e.put("web-staging", "staging-eu", "Degraded"))
	e.wantDeny("staging Degraded next to unreadable records", msgDegraded)
}

// switchedPolicy is the example policy set with its stage package turned on and off, as a
// hot reload adds or removes stage.rego.
type switchedPolicy struct {
	set   *policy.Set
	stage atomic.Bool
}

func (p *switchedPolicy) Has(pt policy.Point) bool {
	return p.set.Has(pt) && (pt != policy.Stage || p.stage.Load())
}

func (p *switchedPolicy) Evaluate(ctx context.Context, pt policy.Point, in any) (policy.Decision, error) {
	if !p.Has(pt) {
		return policy.Decision{}, nil
	}
	return p.set.Evaluate(ctx, pt, in)
}

// TestStageGateWatcherStartsWithStagePolicy: no watcher runs while no stage policy is loaded;
// the first gate after one is added starts it and answers on every record; the watcher stops
// when a reload removes the stage policy, and starts again when one comes back.
func TestStageGateWatcherStartsWithStagePolicy(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t, false)
	e.put("web-staging", "staging-eu", "Degraded")
	set, err := policy.Load(context.Background(), filepath.Join("..", "..", "examples", "policies"))
	if err != nil {
		t.Fatal(err)
	}
	sw := &switchedPolicy{set: set}
	h := &watchHook{}
	e.start(WithPolicy(sw), h.option())
	e.wantDeny("no stage policy")
	time.Sleep(100 * time.Millisecond)
	h.mu.Lock()
	opened := h.opened
	h.mu.Unlock()
	if opened != 0 {
		t.Fatalf("%d watchers opened with no stage policy", opened)
	}

	sw.stage.Store(true) // a reload added stage.rego
	e.wantDeny("stage policy added", msgDegraded)
	h.mu.Lock()
	opened = h.opened
	h.mu.Unlock()
	if opened != 1 {
		t.Fatalf("%d watchers opened after the stage policy came", opened)
	}
	before := e.sent()
	e.wantDeny("stage policy added", msgDegraded)
	if n := e.sent() - before; n > 2 {
		t.Fatalf("a gate sent %d messages with a watcher caught up", n)
	}

	sw.stage.Store(false) // a reload removed it: the watcher stops
	h.mu.Lock()
	w := h.current
	h.mu.Unlock()
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher still runs with no stage policy")
	}
	e.wantDeny("no stage policy again")
	rev := e.put("web-staging", "staging-eu", "Healthy") // while nothing watches

	sw.stage.Store(true)
	e.wantDeny("stage policy back, staging Healthy meanwhile")
	e.seen(rev)
	h.mu.Lock()
	opened = h.opened
	h.mu.Unlock()
	if opened != 2 {
		t.Fatalf("%d watchers opened, want 2 (one each time a stage policy came)", opened)
	}
	e.wantDeny("stage policy back, from the new watcher")
}

// recordKeys is the sorted keys of an app list converted for the policy engine.
func recordKeys(t *testing.T, v any) []string {
	t.Helper()
	arr, ok := v.(*ast.Array)
	if !ok {
		t.Fatalf("app list is %T, want an OPA array", v)
	}
	var keys []string
	arr.Foreach(func(x *ast.Term) {
		j, err := ast.JSON(x.Value)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, j.(map[string]any)["key"].(string))
	})
	slices.Sort(keys)
	return keys
}
