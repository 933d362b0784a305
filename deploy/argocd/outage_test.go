package argocd

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/queue"
)

// lockedBuf collects log output for assertions.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (w *world) view(id string) agent.View { return w.client.View(context.Background(), id) }

func (w *world) leaderReg(id string) *agent.Registration {
	regs, _ := w.client.Registered(context.Background(), id)
	for i := range regs {
		if regs[i].Leader {
			return &regs[i]
		}
	}
	return nil
}

func TestRevokedTokenMarksViewStaleAndRecovers(t *testing.T) {
	w := newWorld(t)
	logs := &lockedBuf{}
	w.log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	w.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	w.start("eu", "r1")
	w.waitRecord("eu", "web", "a fresh record", func(s *agent.AppStatus) bool { return s != nil && s.Stale == nil && !s.ConfirmedAt.IsZero() })
	w.eventually(5*time.Second, "a fresh view", func() bool { return w.view("eu").Fresh })

	w.argo.RevokeToken(w.argo.Token())
	st := w.waitRecord("eu", "web", "the record marked stale", func(s *agent.AppStatus) bool { return s.Stale != nil })
	if !strings.Contains(st.Stale.Reason, "token was rejected") || st.Stale.Since.IsZero() || st.Health != agent.HealthHealthy {
		t.Fatalf("stale mark: %+v (health %s)", st.Stale, st.Health)
	}
	// The registration is written after the record (a moment later under load): wait for it.
	w.eventually(5*time.Second, "a stale view", func() bool { return !w.view("eu").Fresh })
	v := w.view("eu")
	if v.Fresh || !strings.Contains(v.Describe(), "agent eu cannot see Argo CD since") || !strings.Contains(v.Reason, "token was rejected") {
		t.Fatalf("view while the token is refused: %+v", v)
	}
	if r := w.leaderReg("eu"); r == nil || r.Healthy || !r.Stale || r.StaleSince.IsZero() {
		t.Fatalf("leader registration while the token is refused: %+v", r)
	}
	w.eventually(5*time.Second, "the refused token logged at error", func() bool {
		return strings.Contains(logs.String(), "level=ERROR") && strings.Contains(logs.String(), "refused the agent's token")
	})
	if strings.Contains(logs.String(), w.argo.Token()) {
		t.Fatal("the token reached the log")
	}
	// A change made while the agent is blind is there once it sees again.
	w.changeWhileBlind(argocdtest.HealthDegraded, "changed while blind", func() { w.argo.RestoreToken(w.argo.Token()) })
}

// changeWhileBlind changes web's health while agent eu cannot see Argo CD, lets it see again
// with recover, and waits for a fresh record that shows the change and a fresh view.
func (w *world) changeWhileBlind(health, message string, recover func()) {
	w.t.Helper()
	if err := w.argo.SetHealth("web", health, message); err != nil {
		w.t.Fatal(err)
	}
	recover()
	w.waitRecord("eu", "web", "a fresh record after recovery with the change: "+message, func(s *agent.AppStatus) bool {
		return s.Stale == nil && s.HealthMessage == message
	})
	w.eventually(5*time.Second, "a fresh view after recovery", func() bool { return w.view("eu").Fresh })
}

func TestArgoRestartIsRiddenOut(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	w.start("eu", "r1")
	w.waitRecord("eu", "web", "a record", func(s *agent.AppStatus) bool { return s != nil })
	w.eventually(5*time.Second, "a fresh view", func() bool { return w.view("eu").Fresh })

	w.argo.SetDown(true)
	w.eventually(5*time.Second, "the view goes stale", func() bool { return !w.view("eu").Fresh })
	w.waitRecord("eu", "web", "the record marked stale (reconnect failed)", func(s *agent.AppStatus) bool {
		return s.Stale != nil && strings.Contains(s.Stale.Reason, "unreachable")
	})
	w.changeWhileBlind(argocdtest.HealthProgressing, "changed during the restart", func() { w.argo.SetDown(false) })
}

func TestUnresponsiveArgoGoesStale(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	w.start("eu", "r1", func(_ *Options, c *Client) { c.IdleTimeout, c.Timeout = 300*time.Millisecond, 300*time.Millisecond })
	w.waitRecord("eu", "web", "a record", func(s *agent.AppStatus) bool { return s != nil })
	w.argo.SetUnresponsive(true)
	w.waitRecord("eu", "web", "the record marked stale", func(s *agent.AppStatus) bool { return s.Stale != nil })
	if v := w.view("eu"); v.Fresh {
		t.Fatalf("view while Argo CD does not answer: %+v", v)
	}
	w.argo.SetUnresponsive(false)
	w.waitRecord("eu", "web", "a fresh record", func(s *agent.AppStatus) bool { return s.Stale == nil })
	w.eventually(5*time.Second, "a fresh view", func() bool { return w.view("eu").Fresh })
}

// crashable runs an agent replica on its own NATS connection, so closing that connection
// is a crash: no lease release, no registration removal.
func (w *world) crashable(id, replica string) (*Agent, *nats.Conn) {
	w.t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(w.conn.Embedded()))
	if err != nil {
		w.t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		w.t.Fatal(err)
	}
	c, err := NewClient(ClientOptions{URL: w.argo.URL(), Token: w.argo.Token()})
	if err != nil {
		w.t.Fatal(err)
	}
	a, err := New(Options{AgentID: id, Replica: replica, Client: c, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Log: w.log})
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx, &queue.Conn{NC: nc, JS: js}) }()
	w.t.Cleanup(func() { cancel(); nc.Close(); <-done })
	w.waitRegistered(id, replica)
	return a, nc
}

func TestCrashedLeaderFailsOverWithinSeconds(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	r1, nc1 := w.crashable("eu", "r1")
	w.eventually(5*time.Second, "r1 leads", r1.IsLeader)
	r2, _ := w.crashable("eu", "r2")
	w.eventually(5*time.Second, "a fresh view", func() bool { return w.view("eu").Fresh })
	if r2.IsLeader() {
		t.Fatal("two leaders")
	}
	crashed := time.Now()
	nc1.Close() // SIGKILL as NATS sees it: no release, no goodbye
	w.eventually(20*time.Second, "r2 takes over", r2.IsLeader)
	deadline := time.Now().Add(20 * time.Second)
	for {
		v := w.view("eu")
		if v.Fresh && r2.IsLeader() {
			break
		}
		if time.Now().After(deadline) {
			regs, err := w.client.Registered(context.Background(), "eu")
			t.Fatalf("no fresh view from r2: %+v; registrations %+v %v", v, regs, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(crashed)
	t.Logf("failover took %s", took.Round(time.Millisecond))
	// Lease TTL 6s + retry 1s; the bucket TTL (30s) was the old bound. Generous margin for
	// a loaded machine, still well under the old 30s.
	if took > 15*time.Second {
		t.Fatalf("failover took %s, want well under the 30s bucket TTL (lease TTL 6s)", took)
	}
	if err := w.argo.SetHealth("web", argocdtest.HealthDegraded, "after failover"); err != nil {
		t.Fatal(err)
	}
	w.waitRecord("eu", "web", "a change written by r2", func(s *agent.AppStatus) bool { return s.HealthMessage == "after failover" })
}

func TestRegistrationRightFromTheStart(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	w.addApp(app("api", "apps/api", nil), argocdtest.Deployed())
	// A heartbeat far longer than the test: only the immediate re-registrations can make it
	// right.
	w.start("eu", "r1", func(o *Options, _ *Client) { o.Heartbeat = time.Minute })
	w.eventually(5*time.Second, "registration with leader, 2 apps, fresh", func() bool {
		r := w.leaderReg("eu")
		return r != nil && r.Apps == 2 && !r.Stale && r.Healthy
	})
}

func TestBackoffCappedByDefault(t *testing.T) {
	c, _ := NewClient(ClientOptions{URL: "http://127.0.0.1:1", Token: "t"})
	a, err := New(Options{AgentID: "eu", Client: c})
	if err != nil {
		t.Fatal(err)
	}
	if a.o.MaxBackoff > 5*time.Second || a.o.LeaseTTL > 10*time.Second || a.o.Heartbeat*3 > 10*time.Second {
		t.Fatalf("defaults: max backoff %s, lease TTL %s, heartbeat %s", a.o.MaxBackoff, a.o.LeaseTTL, a.o.Heartbeat)
	}
}

// Issue 20 #5: Argo CD v3 keeps the reason for a health status on the resource, not the
// app; the record must carry it (with the resource's kind and name).
func TestHealthMessageFromResources(t *testing.T) {
	w := newWorld(t)
	w.git.Commit(repoURL, "main", map[string]string{"apps/bad/cm.yaml": strings.Replace(healthyCM, "healthy", "degraded", 1)})
	w.addApp(app("bad", "apps/bad", nil), argocdtest.Deployed())
	w.start("eu", "r1")
	st := w.waitRecord("eu", "bad", "Degraded with the resource's message", func(s *agent.AppStatus) bool {
		return s != nil && s.Health == agent.HealthDegraded && s.HealthMessage != ""
	})
	if !strings.Contains(st.HealthMessage, "ConfigMap/") || !strings.Contains(st.HealthMessage, "cfg: data.simulate is degraded") {
		t.Fatalf("health message %q, want the ConfigMap's reason", st.HealthMessage)
	}
	a, _ := w.argo.App("bad")
	if a.Status.Health.Message != "" {
		t.Fatalf("the fake must answer like v3: no message on the app's health, got %q", a.Status.Health.Message)
	}
}

// A token revoked while the watch stream is open ends the stream with 401 in the stream: the
// client must report it as unauthorized (not as a server error), so the agent logs it at
// error and marks its view stale at once.
func TestWatchRevokedOnOpenStreamIsUnauthorized(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	c, err := NewClient(ClientOptions{URL: w.argo.URL(), Token: w.argo.Token()})
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(context.Background(), func() { close(opened) }, func(WatchEvent) {})
	}()
	<-opened
	w.argo.RevokeToken(w.argo.Token())
	select {
	case err := <-done:
		if !errors.Is(err, agent.ErrUnauthorized) || !strings.Contains(err.Error(), "does not have token") || strings.Contains(err.Error(), w.argo.Token()) {
			t.Fatalf("err = %v; want ErrUnauthorized with Argo CD's reason and without the token", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end when its token was revoked")
	}
}
