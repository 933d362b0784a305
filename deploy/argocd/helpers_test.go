package argocd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/queue"
)

const repoURL = "https://git.example/release.git"

const healthyCM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  simulate: healthy\n"

// world is a fake Argo CD, an embedded NATS and agents bridging them.
type world struct {
	t      *testing.T
	argo   *argocdtest.Server
	git    *argocdtest.MemGit
	sha    string
	conn   *queue.Conn
	b      *queue.Buckets
	client *agent.Client
	log    *slog.Logger
}

func newWorld(t *testing.T, opts ...argocdtest.Option) *world {
	t.Helper()
	w := &world{t: t, git: argocdtest.NewMemGit(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w.sha = w.git.Commit(repoURL, "main", map[string]string{"apps/web/cm.yaml": healthyCM, "apps/api/cm.yaml": healthyCM})
	w.argo = argocdtest.New(append([]argocdtest.Option{argocdtest.WithGitReader(w.git), argocdtest.WithTimeline(3*time.Millisecond, 1)}, opts...)...)
	t.Cleanup(w.argo.Close)
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
	if w.b, err = queue.OpenBuckets(ctx, conn.JS); err != nil {
		t.Fatal(err)
	}
	w.client = agent.NewClient(conn.NC, w.b.Apps, w.b.Agents)
	w.client.Timeout = 20 * time.Second
	return w
}

func app(name, path string, labels map[string]string) argocdtest.Application {
	return argocdtest.Application{
		Metadata: argocdtest.ObjectMeta{Name: name, Labels: labels},
		Spec: argocdtest.ApplicationSpec{
			Project:     "default",
			Source:      &argocdtest.ApplicationSource{RepoURL: repoURL, Path: path, TargetRevision: "main"},
			Destination: argocdtest.ApplicationDestination{Server: "https://kubernetes.default.svc", Namespace: "shop"},
		},
	}
}

// gitFilesAppSet is an ApplicationSet whose git files generator reads the files matching files
// on repoURL's main; the apps it generates are named appName and have spec.
func gitFilesAppSet(name, files, appName string, spec argocdtest.ApplicationSpec) argocdtest.ApplicationSet {
	return argocdtest.ApplicationSet{
		Metadata: argocdtest.ObjectMeta{Name: name},
		Spec: argocdtest.ApplicationSetSpec{
			Generators: []argocdtest.ApplicationSetGenerator{{Git: &argocdtest.GitGenerator{RepoURL: repoURL, Revision: "main",
				Files: []argocdtest.GitFileGeneratorItem{{Path: files}}}}},
			Template: argocdtest.ApplicationSetTemplate{
				Metadata: argocdtest.ApplicationSetTemplateMeta{Name: appName},
				Spec:     spec,
			},
		},
	}
}

func (w *world) addApp(a argocdtest.Application, opts ...argocdtest.AppOption) {
	w.t.Helper()
	if err := w.argo.AddApp(a, opts...); err != nil {
		w.t.Fatal(err)
	}
}

type runningAgent struct {
	*Agent
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// stop stops the agent and waits for it (idempotent).
func (r *runningAgent) stop() error {
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.done
	})
	return r.err
}

// start runs an agent against the world's Argo CD with fast reconnects.
func (w *world) start(id, replica string, tune ...func(*Options, *Client)) *runningAgent {
	w.t.Helper()
	c, err := NewClient(ClientOptions{URL: w.argo.URL(), Token: w.argo.Token()})
	if err != nil {
		w.t.Fatal(err)
	}
	o := Options{AgentID: id, Replica: replica, Client: c, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		LeaderRetry: 50 * time.Millisecond, Log: w.log}
	for _, f := range tune {
		f(&o, c)
	}
	a, err := New(o)
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningAgent{Agent: a, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx, w.conn) }()
	w.t.Cleanup(func() { _ = r.stop() })
	w.waitRegistered(id, replica)
	return r
}

func (w *world) waitRegistered(id, replica string) {
	w.t.Helper()
	w.eventually(10*time.Second, "agent "+id+" registered", func() bool {
		regs, _ := w.client.Registered(context.Background(), id)
		for _, r := range regs {
			if r.Replica == replica {
				return true
			}
		}
		return false
	})
}

// eventually polls cond (every 10ms) until it holds or d passes.
func (w *world) eventually(d time.Duration, what string, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			w.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// record reads an app's status record (nil when there is none).
func (w *world) record(agentID, app string) *agent.AppStatus {
	w.t.Helper()
	st, err := w.client.Status(context.Background(), agentID, app)
	if errors.Is(err, agent.ErrNotFound) {
		return nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

// waitRecord waits until the app's record satisfies cond, returning it.
func (w *world) waitRecord(agentID, app, what string, cond func(*agent.AppStatus) bool) *agent.AppStatus {
	w.t.Helper()
	var got *agent.AppStatus
	deadline := time.Now().Add(15 * time.Second)
	for {
		got = w.record(agentID, app)
		if cond(got) {
			return got
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(got, "", " ")
			w.t.Fatalf("%s/%s: timed out waiting for %s; record:\n%s", agentID, app, what, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// keyWrites counts puts and deletes of prflow-apps keys while a test runs.
type keyWrites struct {
	mu   sync.Mutex
	n    map[string]int
	vals map[string][]string
	w    jetstream.KeyWatcher
}

func (w *world) countWrites() *keyWrites {
	w.t.Helper()
	kw, err := w.b.Apps.WatchAll(context.Background(), jetstream.UpdatesOnly())
	if err != nil {
		w.t.Fatal(err)
	}
	c := &keyWrites{n: map[string]int{}, vals: map[string][]string{}, w: kw}
	go func() {
		for e := range kw.Updates() {
			if e == nil {
				continue
			}
			c.mu.Lock()
			c.n[e.Key()]++
			c.vals[e.Key()] = append(c.vals[e.Key()], string(e.Value()))
			c.mu.Unlock()
		}
	}()
	w.t.Cleanup(func() { _ = kw.Stop() })
	return c
}

func (c *keyWrites) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

func (c *keyWrites) values(key string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.vals[key]...)
}

func describe(st *agent.AppStatus) string {
	if st == nil {
		return "<none>"
	}
	phase := "-"
	if st.Operation != nil {
		phase = st.Operation.Phase
	}
	return fmt.Sprintf("%s/%s/%s@%s", st.Sync, st.Health, phase, st.Revision)
}
