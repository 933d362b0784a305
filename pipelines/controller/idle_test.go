package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
)

const parkOnKey = "name: kv\nstages:\n  - id: s\n    steps:\n      - id: w\n        type: Park\n        with: {key: %s}\n"

func waitParked(t *testing.T, e *env, n int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for e.ctl.metrics.Parked() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d steps parked", e.ctl.metrics.Parked(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A record written while no controller runs wakes the steps parked on it once one starts
// again: the Park step's poll is an hour, so nothing else can.
func TestWakeForChangeWhileControllerDown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := newEnv(t, envOpts{workers: 1, dir: dir})
	r := e.startRun(fmt.Sprintf(parkOnKey, "agent1.shop-dev"), nil)
	other := e.startRun(fmt.Sprintf(parkOnKey, "agent1.untouched"), nil)
	waitParked(t, e, 2)
	e.stop()

	// Only NATS, on the same data: the record changes while no controller watches.
	ctx := context.Background()
	conn, err := queue.Open(ctx, queue.Options{DataDir: dir, Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	b, err := queue.OpenBuckets(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Apps.Put(ctx, "agent1.shop-dev", []byte(`{"health":"Healthy"}`)); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	e.start(envOpts{workers: 1, dir: dir})
	r = e.wait(r.ID, 60*time.Second)
	// Two paths see the change and either may wake the step first: the replay of prflow-apps,
	// or indexing the run against the change log the replay filled.
	if st := step(r, "s", "w"); r.Status != pipelines.StSucceeded || (st.Outputs["woke"] != "key agent1.shop-dev changed while no controller watched" && st.Outputs["woke"] != "key changed before the step parked") {
		t.Fatalf("%s %#v", r.Status, st.Outputs)
	}
	// The run whose key did not change stays parked, not woken.
	got, err := e.ctl.Get(ctx, other.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st := step(got, "s", "w"); st.Status != pipelines.StWaiting || st.Wake != 0 {
		t.Fatalf("untouched key's step: %s wake %d", st.Status, st.Wake)
	}
}

// A change to an agent's registration that its records do not show (here its leader turns
// unhealthy) wakes the steps parked on its records, so they can say they cannot see; a
// heartbeat that changes nothing else wakes nobody, and nor does another agent's change.
func TestAgentViewChangeWakesParkedSteps(t *testing.T) {
	t.Parallel()
	const check = 250 * time.Millisecond // viewCheck is 5 s; the test waits out several compares
	e := newEnv(t, envOpts{workers: 1, ctl: []Option{withViewCheck(check)}})
	ctx := context.Background()
	register := func(agentID string, healthy bool) {
		t.Helper()
		now := time.Now()
		reg := agent.Registration{V: 1, Agent: agentID, Replica: "r1", Kind: "argocd", Leader: true, Healthy: healthy,
			Started: now, Seen: now, Expires: now.Add(queue.LeaseTTL)}
		data, _ := json.Marshal(reg)
		if _, err := e.ctl.b.Agents.Put(ctx, agent.RegistrationKey(agentID, "r1"), data); err != nil {
			t.Fatal(err)
		}
	}
	register("eu", true)
	register("us", true)
	r := e.startRun(fmt.Sprintf(parkOnKey, agent.StatusKey("eu", "web")), nil)
	waitParked(t, e, 1)
	wake := func() int {
		got, err := e.ctl.Get(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		return step(got, "s", "w").Wake
	}
	// Heartbeats, and another agent turning unhealthy: no wake.
	for i := 0; i < 3; i++ {
		register("eu", true)
		time.Sleep(50 * time.Millisecond)
	}
	register("us", false)
	time.Sleep(4 * check)
	if w := wake(); w != 0 {
		t.Fatalf("woken %d times without a change to its agent's view", w)
	}
	register("eu", false)
	deadline := time.Now().Add(30 * time.Second)
	for wake() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the step was not woken when its agent turned unhealthy")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// withViewCheck compares agents' views every d instead of viewCheck.
func withViewCheck(d time.Duration) Option { return func(c *Controller) { c.regs.check = d } }

// An agent's last replica expiring (it died: nothing is written) changes its view; so does
// one coming back. Found by comparing, not by an event.
func TestAgentViewExpiry(t *testing.T) {
	g := newRegistrations()
	now := time.Now()
	g.agents["eu.r1"] = agentReg{reg: agent.Registration{Agent: "eu", Replica: "r1", Leader: true, Healthy: true}, at: now}
	if got := g.changedViews(now); len(got) != 0 {
		t.Fatalf("first look: %v", got)
	}
	if got := g.changedViews(now.Add(time.Second)); len(got) != 0 {
		t.Fatalf("nothing changed: %v", got)
	}
	later := now.Add(queue.LeaseTTL + time.Second)
	if got := g.changedViews(later); len(got) != 1 || got[0] != "eu" {
		t.Fatalf("expired: %v", got)
	}
	g.agents["eu.r2"] = agentReg{reg: agent.Registration{Agent: "eu", Replica: "r2", Leader: true, Healthy: true}, at: later}
	if got := g.changedViews(later); len(got) != 1 || got[0] != "eu" {
		t.Fatalf("back: %v", got)
	}
}

// countingKV counts key listings of a bucket.
type countingKV struct {
	jetstream.KeyValue
	lists atomic.Int64
}

func (k *countingKV) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	k.lists.Add(1)
	return k.KeyValue.ListKeys(ctx, opts...)
}

// Run starts check their agents from memory: no listing of prflow-agents per start, also
// when many start at once. An agent that is not registered is still refused (the refusal is
// confirmed from the bucket), and one registered a moment ago is accepted.
func TestStartCheckFromRegistrations(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	ctx := context.Background()
	now := time.Now()
	data, _ := json.Marshal(agent.Registration{V: 1, Agent: "eu", Replica: "r1", Leader: true, Healthy: true, Seen: now, Expires: now.Add(queue.LeaseTTL)})
	if _, err := e.ctl.b.Agents.Put(ctx, agent.RegistrationKey("eu", "r1"), data); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if got, _ := e.ctl.regs.liveAgents(ctx); got["eu"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the registration never reached the cache")
		}
		time.Sleep(20 * time.Millisecond)
	}
	kv := &countingKV{KeyValue: e.ctl.b.Agents}
	e.ctl.b.Agents = kv
	src := func(agentID string) []byte {
		return fmt.Appendf(nil, "name: a\nenvironments:\n  - {name: prod, clusters: [{name: eu, agent: %s}]}\nstages:\n  - id: s\n    environment: prod\n    steps:\n      - {id: n, type: Noop}\n", agentID)
	}
	p, err := pipelines.Load("a.yaml", src("eu"), e.ctl.reg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- e.ctl.Check(ctx, p, nil) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("check of a registered agent: %v", err)
		}
	}
	if n := kv.lists.Load(); n != 0 {
		t.Fatalf("prflow-agents listed %d times for 50 starts of a registered agent", n)
	}
	unknown, err := pipelines.Load("b.yaml", src("nowhere"), e.ctl.reg)
	if err != nil {
		t.Fatal(err)
	}
	err = e.ctl.Check(ctx, unknown, nil)
	if err == nil || kv.lists.Load() == 0 {
		t.Fatalf("unregistered agent: %v (listings %d)", err, kv.lists.Load())
	}
	if want := `agent "nowhere" is not registered`; !strings.Contains(err.Error(), want) {
		t.Fatalf("%v, want %q", err, want)
	}
	// Registered just now: the cache may not have it yet, the bucket has.
	data, _ = json.Marshal(agent.Registration{V: 1, Agent: "nowhere", Replica: "r1", Leader: true, Healthy: true, Seen: time.Now()})
	if _, err := kv.Put(ctx, agent.RegistrationKey("nowhere", "r1"), data); err != nil {
		t.Fatal(err)
	}
	if err := e.ctl.Check(ctx, unknown, nil); err != nil {
		t.Fatalf("agent registered a moment ago: %v", err)
	}
}

// The change log keeps at most its size in keys, forgets entries past its age, keeps the
// newest time of a key set again, and its queue does not grow past twice its size.
func TestChangeLogBounded(t *testing.T) {
	l := newChangeLog(time.Minute, 100)
	t0 := time.Now()
	for i := range 1000 {
		l.set(fmt.Sprintf("k%d", i), t0, t0)
	}
	if l.len() > 100 || len(l.order)-l.head > 200 {
		t.Fatalf("%d keys, %d queued", l.len(), len(l.order)-l.head)
	}
	if _, ok := l.get("k999"); !ok {
		t.Fatal("newest key dropped")
	}
	if _, ok := l.get("k0"); ok {
		t.Fatal("oldest key kept past the size bound")
	}
	// One key changing over and over: one entry, its latest time.
	for i := range 1000 {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		l.set("hot", at, at)
	}
	if at, _ := l.get("hot"); !at.Equal(t0.Add(999 * time.Millisecond)) {
		t.Fatalf("hot key at %v", at)
	}
	if len(l.order)-l.head > 200 {
		t.Fatalf("%d queued", len(l.order)-l.head)
	}
	// Past the age: everything older goes on the next set.
	late := t0.Add(2 * time.Minute)
	l.set("new", late, late)
	if l.len() != 1 {
		t.Fatalf("%d keys after they aged out", l.len())
	}
}

// Topics noted from many goroutines while steps park: the bound holds under the lock.
func TestChangeLogConcurrent(t *testing.T) {
	c := &Controller{changed: newChangeLog(time.Hour, 500)}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				c.noteTopic(fmt.Sprintf("pr:github:acme/%d#%d", g, i))
				c.mu.Lock()
				_, _ = c.changed.get(fmt.Sprintf("pr:github:acme/%d#%d", g, i))
				c.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := c.changed.len(); n > 500 || n == 0 {
		t.Fatalf("%d keys", n)
	}
}

// BenchmarkChangeLogSet: a set costs the same with a full log (no scan of the map).
func BenchmarkChangeLogSet(b *testing.B) {
	l := newChangeLog(time.Hour, changeMaxKeys)
	now := time.Now()
	keys := make([]string, 4*changeMaxKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("pr:github:acme/deploy#%d", i)
	}
	for i := range changeMaxKeys {
		l.set(keys[i], now, now)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l.set(keys[i%len(keys)], now, now)
	}
}
