package flux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/fluxtest"
	"github.com/prflow/prflow/queue"
)

const repoURL = "https://git.example/release.git"

// heads is the fake git the fake source-controller fetches from.
type heads struct {
	mu sync.Mutex
	m  map[string]string
}

func (h *heads) set(branch, sha string) {
	h.mu.Lock()
	h.m[branch] = sha
	h.mu.Unlock()
}

func (h *heads) resolve(url, branch string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if url != repoURL {
		return "", fmt.Errorf("unable to clone '%s': repository not found", url)
	}
	sha, ok := h.m[branch]
	if !ok {
		return "", fmt.Errorf("unable to clone '%s': couldn't find remote ref \"refs/heads/%s\"", url, branch)
	}
	return sha, nil
}

// world is the fake Flux, an embedded NATS and the agent "eu" bridging them.
type world struct {
	t      *testing.T
	flux   *fluxtest.Server
	git    *heads
	conn   *queue.Conn
	client *agent.Client
	log    *slog.Logger
}

func sha(n int) string { return fmt.Sprintf("%040x", n) }

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, git: &heads{m: map[string]string{"main": sha(1)}}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w.flux = fluxtest.New(w.git.resolve, fluxtest.WithStep(5*time.Millisecond))
	t.Cleanup(w.flux.Close)
	ctx := context.Background()
	conn, err := queue.Open(ctx, queue.Options{DataDir: t.TempDir(), Logger: w.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if err := queue.Setup(ctx, conn.JS, 1); err != nil {
		t.Fatal(err)
	}
	w.conn = conn
	b, err := queue.OpenBuckets(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	w.client = agent.NewClient(conn.NC, b.Apps, b.Agents)
	w.client.Timeout = 20 * time.Second
	w.must(w.flux.Apply("gitrepositories", map[string]any{"metadata": map[string]any{"name": "release"},
		"spec": map[string]any{"url": repoURL, "ref": map[string]any{"branch": "main"}, "interval": "1m"}}))
	for _, env := range []string{"dev", "prod"} {
		w.must(w.flux.Apply("kustomizations", map[string]any{
			"metadata": map[string]any{"name": "web-" + env, "labels": map[string]any{"env": env, ParentLabel: "web"}},
			"spec": map[string]any{"path": "./envs/" + env, "prune": true, "targetNamespace": "web-" + env, "interval": "5m",
				"sourceRef": map[string]any{"kind": "GitRepository", "name": "release"}}}))
	}
	return w
}

func (w *world) must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

// start runs a replica of agent "eu" and waits until its view is fresh.
func (w *world) start(name string, mod func(*Options)) (*Agent, func()) {
	w.t.Helper()
	o := Options{AgentID: "eu", Replica: name, Config: &rest.Config{Host: w.flux.URL()}, Log: w.log,
		LeaderRetry: 100 * time.Millisecond, Tick: 50 * time.Millisecond, SourceWait: 5 * time.Second}
	if mod != nil {
		mod(&o)
	}
	a, err := New(o)
	w.must(err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, w.conn) }()
	stop := func() { cancel(); <-done }
	w.t.Cleanup(func() {
		select {
		case <-ctx.Done():
		default:
			stop()
		}
	})
	w.wait("agent fresh", func() bool { return a.IsLeader() && w.client.View(ctx, "eu").Fresh })
	return a, stop
}

func (w *world) wait(what string, ok func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			w.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// record waits for the app's record to satisfy ok and returns it.
func (w *world) record(app string, ok func(*agent.AppStatus) bool) *agent.AppStatus {
	w.t.Helper()
	var last *agent.AppStatus
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := w.client.Status(context.Background(), "eu", app)
		if err == nil && ok(st) {
			return st
		}
		if err == nil {
			last = st
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("record of %s never as wanted; last %+v (op %+v) err %v", app, last, opOf(last), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func opOf(st *agent.AppStatus) *agent.Operation {
	if st == nil {
		return nil
	}
	return st.Operation
}

func TestParseRevision(t *testing.T) {
	for in, want := range map[string]string{
		"main@sha1:" + sha(7):          sha(7),
		"sha1:" + sha(8):               sha(8),
		"v1.2.0@sha256:abcdef":         "abcdef",
		"refs/heads/feat/x@sha1:00ff1": "00ff1",
		"6.3.1":                        "6.3.1",
		"":                             "",
	} {
		if got := ParseRevision(in); got != want {
			t.Errorf("ParseRevision(%q) = %q, want %q", in, got, want)
		}
	}
}

// The records say what Flux applied, whether that is what the source holds, and health from
// Ready with Flux's own message; a sync is a reconcile request that deploys the merged commit.
func TestFluxSyncDeploysMergedCommit(t *testing.T) {
	w := newWorld(t)
	w.start("r1", nil)
	st := w.record("web-dev", func(s *agent.AppStatus) bool { return s.Health == agent.HealthHealthy })
	if st.Sync != agent.SyncSynced || st.Revision != sha(1) || st.ApplicationSet != "web" || st.Source.RepoURL != repoURL ||
		st.Source.Path != "./envs/dev" || st.Namespace != "web-dev" || !strings.Contains(st.HealthMessage, "Applied revision: main@sha1:"+sha(1)) {
		t.Fatalf("record %+v", st)
	}
	if st.Operation != nil {
		t.Errorf("operation %+v before anyone asked for a reconcile", st.Operation)
	}

	w.git.set("main", sha(2)) // a merge; Flux would only see it at its next interval
	rep, err := w.client.Sync(context.Background(), "eu", agent.SyncRequest{Apps: []string{"web-dev"}, RunID: "run1", Step: "dev/sync/1"})
	if err != nil || len(rep.Results) != 1 || rep.Results[0].Error != nil || rep.Results[0].Revision != sha(2) || rep.Results[0].UID == "" {
		t.Fatalf("sync: %+v %v", rep, err)
	}
	st = w.record("web-dev", func(s *agent.AppStatus) bool { return s.Operation != nil && s.Operation.Finished() })
	op := st.Operation
	if op.Phase != agent.PhaseSucceeded || !op.Tagged("run1", "dev/sync/1") || op.Revision != sha(2) || op.SyncedRevision != sha(2) ||
		st.Revision != sha(2) || st.Sync != agent.SyncSynced || st.Health != agent.HealthHealthy {
		t.Fatalf("after sync: %+v op %+v", st, op)
	}
	// Annotations only: the spec was never written (its generation did not move).
	ks := w.flux.Get("kustomizations", "flux-system", "web-dev")
	if g := ks["metadata"].(map[string]any)["generation"]; g != int64(1) {
		t.Errorf("generation %v: the agent wrote the spec", g)
	}
	// prod was not asked: it stays on the old commit, OutOfSync against the new artifact
	// until Flux reconciles it (here: at once, as the source moved — like real Flux).
	w.record("web-prod", func(s *agent.AppStatus) bool { return s.Revision == sha(2) && s.Operation == nil })
}

// A bad change: Ready=False with Flux's message is a failed operation, Degraded, with the message.
func TestFluxFailedReconcileCarriesFluxMessage(t *testing.T) {
	w := newWorld(t)
	w.start("r1", nil)
	w.record("web-dev", func(s *agent.AppStatus) bool { return s.Health == agent.HealthHealthy })
	msg := "Deployment/web-dev/web status: 'Failed': progress deadline exceeded"
	w.flux.FailRevision(sha(3), msg)
	w.git.set("main", sha(3))
	rep, err := w.client.Sync(context.Background(), "eu", agent.SyncRequest{Apps: []string{"web-dev"}, RunID: "run2", Step: "dev/sync/1"})
	if err != nil || rep.Results[0].Error != nil {
		t.Fatalf("sync: %+v %v", rep, err)
	}
	st := w.record("web-dev", func(s *agent.AppStatus) bool { return s.Operation != nil && s.Operation.Finished() })
	if st.Operation.Phase != agent.PhaseFailed || !strings.Contains(st.Operation.Message, msg) || st.Health != agent.HealthDegraded ||
		st.HealthMessage != msg || st.Revision != sha(1) || st.Sync != agent.SyncOutOfSync {
		t.Fatalf("record %+v op %+v", st, st.Operation)
	}
}

// Suspended objects are shown as such and never reconciled by prflow.
func TestFluxSuspendedRefused(t *testing.T) {
	w := newWorld(t)
	w.start("r1", nil)
	w.record("web-prod", func(s *agent.AppStatus) bool { return s.Health == agent.HealthHealthy })
	ks := w.flux.Get("kustomizations", "flux-system", "web-prod")
	ks["spec"].(map[string]any)["suspend"] = true
	w.must(w.flux.Apply("kustomizations", ks))
	st := w.record("web-prod", func(s *agent.AppStatus) bool { return s.Health == agent.HealthSuspended })
	if !strings.Contains(st.HealthMessage, "suspended") || st.AutoSync {
		t.Errorf("record %+v", st)
	}
	before := w.flux.Requests("PATCH", "kustomizations")
	rep, err := w.client.Sync(context.Background(), "eu", agent.SyncRequest{Apps: []string{"web-prod"}, RunID: "r", Step: "s"})
	if err != nil || rep.Results[0].Error == nil || !errors.Is(rep.Results[0].Error, agent.ErrRejected) ||
		!strings.Contains(rep.Results[0].Error.Message, "Kustomization flux-system/web-prod is suspended") {
		t.Fatalf("sync of a suspended Kustomization: %+v %v", rep, err)
	}
	if n := w.flux.Requests("PATCH", "kustomizations"); n != before {
		t.Errorf("%d PATCHes of kustomizations for a refused sync", n-before)
	}
}

// Unknown apps, unsupported diff and dry run: clear errors, never "no change".
func TestFluxMistakenRequests(t *testing.T) {
	w := newWorld(t)
	w.start("r1", nil)
	rep, err := w.client.Sync(context.Background(), "eu", agent.SyncRequest{Apps: []string{"nope"}})
	if err != nil || !errors.Is(rep.Results[0].Error, agent.ErrNotFound) || !strings.Contains(rep.Results[0].Error.Error(), "flux-system/nope") {
		t.Errorf("sync of a missing app: %+v %v", rep, err)
	}
	_, err = w.client.Diff(context.Background(), "eu", agent.DiffRequest{Apps: []string{"web-dev"}, Revision: sha(2)})
	if !errors.Is(err, agent.ErrUnsupported) || !strings.Contains(err.Error(), "not supported on Flux") {
		t.Errorf("diff: %v", err)
	}
	if _, err := w.client.Sync(context.Background(), "eu", agent.SyncRequest{Apps: []string{"web-dev"}, DryRun: true}); !errors.Is(err, agent.ErrUnsupported) {
		t.Errorf("dry run: %v", err)
	}
	if _, err := w.client.Apps(context.Background(), "eu", agent.AppsQuery{Selector: "env in (dev"}); !errors.Is(err, agent.ErrInvalid) {
		t.Errorf("bad selector: %v", err)
	}
}

// FetchLinkedApps' queries: by label selector, by parent (ApplicationSet), by name.
func TestFluxAppsQueries(t *testing.T) {
	w := newWorld(t)
	w.start("r1", nil)
	names := func(q agent.AppsQuery) string {
		apps, err := w.client.Apps(context.Background(), "eu", q)
		if err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
		var out []string
		for _, a := range apps {
			out = append(out, a.Ref())
		}
		return strings.Join(out, ",")
	}
	for q, want := range map[*agent.AppsQuery]string{
		{Selector: "env=prod"}:       "web-prod",
		{ApplicationSet: "web"}:      "web-dev,web-prod",
		{ApplicationSet: "other"}:    "",
		{Names: []string{"web-dev"}}: "web-dev",
		{NameRegex: "^web-d"}:        "web-dev",
	} {
		if got := names(*q); got != want {
			t.Errorf("%+v: %q, want %q", *q, got, want)
		}
	}
}

// source-controller stopped: a reconcile request nobody handles makes the record stale after
// StuckAfter (readers stop judging it), and the sync says why instead of hanging.
func TestFluxSourceControllerDownMarksStale(t *testing.T) {
	w := newWorld(t)
	w.start("r1", func(o *Options) { o.StuckAfter, o.SourceWait = 500*time.Millisecond, 300*time.Millisecond })
	w.record("web-dev", func(s *agent.AppStatus) bool { return s.Health == agent.HealthHealthy })
	w.flux.StopSource(true)
	w.git.set("main", sha(4))
	rep, err := w.client.Sync(context.Background(), "eu", agent.SyncRequest{Apps: []string{"web-dev"}, RunID: "r", Step: "s"})
	if err != nil || !errors.Is(rep.Results[0].Error, agent.ErrUnavailable) || !strings.Contains(rep.Results[0].Error.Message, "is source-controller running?") {
		t.Fatalf("sync with source-controller down: %+v %v", rep, err)
	}
	st := w.record("web-dev", func(s *agent.AppStatus) bool { return s.Stale != nil })
	if !strings.Contains(st.Stale.Reason, "source-controller has not handled the reconcile request of GitRepository flux-system/release") ||
		st.Revision != sha(1) {
		t.Fatalf("stale record %+v", st)
	}
	if v := agent.RecordView(w.client.View(context.Background(), "eu"), st); v.Fresh {
		t.Errorf("view of a stuck record is fresh")
	}
	w.flux.StopSource(false)
	st = w.record("web-dev", func(s *agent.AppStatus) bool { return s.Stale == nil && s.Revision == sha(4) })
	if st.Sync != agent.SyncSynced {
		t.Errorf("after recovery %+v", st)
	}
}

// The Kubernetes API gone: every record is marked stale, and the view recovers when it is back.
func TestFluxAPIDownMarksStale(t *testing.T) {
	w := newWorld(t)
	w.start("r1", nil)
	w.record("web-dev", func(s *agent.AppStatus) bool { return s.Health == agent.HealthHealthy })
	w.flux.Close()
	w.record("web-dev", func(s *agent.AppStatus) bool { return s.Stale != nil && strings.Contains(s.Stale.Reason, "watch") })
	if v := w.client.View(context.Background(), "eu"); v.Fresh {
		t.Errorf("view fresh with the API down")
	}
}

// Two replicas: one leader writes; when it stops the other takes over and keeps records current.
func TestFluxLeaderFailover(t *testing.T) {
	w := newWorld(t)
	a1, stop1 := w.start("r1", nil)
	o := Options{AgentID: "eu", Replica: "r2", Config: &rest.Config{Host: w.flux.URL()}, Log: w.log, LeaderRetry: 100 * time.Millisecond, Tick: 50 * time.Millisecond}
	a2, err := New(o)
	w.must(err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a2.Run(ctx, w.conn) }()
	defer func() { cancel(); <-done }()
	time.Sleep(300 * time.Millisecond)
	if !a1.IsLeader() || a2.IsLeader() {
		t.Fatalf("leaders: r1 %v r2 %v", a1.IsLeader(), a2.IsLeader())
	}
	stop1()
	w.wait("r2 leads", func() bool { return a2.IsLeader() && w.client.View(ctx, "eu").Fresh })
	w.git.set("main", sha(5))
	w.flux.Poll()
	w.record("web-dev", func(s *agent.AppStatus) bool { return s.Revision == sha(5) && s.Stale == nil })
}
