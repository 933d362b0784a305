package argocd

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocdtest"
)

func TestRecordsFollowArgoAndSyncIsTagged(t *testing.T) {
	w := newWorld(t)
	owner := app("web-dev", "apps/web", map[string]string{"harness.io/serviceRef": "web", "harness.io/envRef": "dev"})
	yes := true
	owner.Metadata.OwnerReferences = []argocdtest.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "ApplicationSet", Name: "web", UID: "u1", Controller: &yes}}
	w.addApp(owner)
	a := w.start("eu", "r1")

	st := w.waitRecord("eu", "web-dev", "first record", func(s *agent.AppStatus) bool { return s != nil })
	if st.Name != "web-dev" || st.Project != "default" || st.Namespace != "shop" || st.Cluster != "in-cluster" ||
		st.ApplicationSet != "web" || st.Labels["harness.io/envRef"] != "dev" || st.Source.Path != "apps/web" ||
		st.Source.TargetRevision != "main" || st.Sync != agent.SyncOutOfSync || st.Health != agent.HealthMissing ||
		st.Revision != w.sha || st.URL != w.argo.URL()+"/applications/argocd/web-dev" || st.Agent != "eu" || st.V != agent.Version {
		b, _ := json.MarshalIndent(st, "", " ")
		t.Fatalf("first record does not describe the app:\n%s", b)
	}

	rep, err := w.client.Sync(context.Background(), "eu", agent.SyncRequest{Apps: []string{"web-dev"}, RunID: "run-7", Step: "dev/sync/1",
		Prune: true, ApplyOnly: true, ForceApply: true, SyncOptions: []string{"CreateNamespace=true"},
		Retry: &agent.RetryStrategy{Limit: 2, Backoff: &agent.Backoff{Duration: "5s", Factor: 2, MaxDuration: "1m"}}})
	if err != nil || len(rep.Results) != 1 || rep.Results[0].Error != nil || rep.Results[0].Revision != w.sha {
		t.Fatalf("sync: %v %+v", err, rep)
	}
	done := w.waitRecord("eu", "web-dev", "Synced/Healthy after our operation", func(s *agent.AppStatus) bool {
		return s.Sync == agent.SyncSynced && s.Health == agent.HealthHealthy && s.Operation != nil && s.Operation.Phase == agent.PhaseSucceeded
	})
	if !done.Operation.Tagged("run-7", "dev/sync/1") || done.Operation.SyncedRevision != w.sha || done.SyncedRevision != w.sha || done.Resources.Total != 1 {
		t.Fatalf("final record does not carry the run's operation: %+v", done.Operation)
	}
	// What Argo CD received: JSON content type (else 415), the tags and the options.
	var body map[string]any
	for _, r := range w.argo.Requests() {
		if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/sync") {
			if r.Status != 200 {
				t.Fatalf("sync answered %d", r.Status)
			}
			_ = json.Unmarshal(r.Body, &body)
		}
	}
	b, _ := json.Marshal(body)
	for _, want := range []string{`"infos":[{"name":"prflow.run","value":"run-7"},{"name":"prflow.step","value":"dev/sync/1"}]`,
		`"strategy":{"apply":{"force":true}}`, `"prune":true`, `"syncOptions":{"items":["CreateNamespace=true"]}`,
		`"retryStrategy":{"backoff":{"duration":"5s","factor":2,"maxDuration":"1m"},"limit":2}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("sync body lacks %s: %s", want, b)
		}
	}
	if a.Served() != 1 {
		t.Errorf("served %d requests, want 1", a.Served())
	}
}

func TestOperationPhasesAsReported(t *testing.T) {
	// The record must show the operation requested but not yet picked up (null
	// operationState) as Pending with our tag, and the realenv order: Succeeded before Synced.
	w := newWorld(t, argocdtest.WithTimeline(40*time.Millisecond, 1))
	w.addApp(app("api", "apps/api", nil))
	w.start("eu", "r1")
	w.waitRecord("eu", "api", "record", func(s *agent.AppStatus) bool { return s != nil })
	seen := map[string]bool{}
	order := []string{}
	stop, stopped := make(chan struct{}), make(chan struct{})
	kw, err := w.b.Apps.Watch(context.Background(), agent.StatusKey("eu", "api"))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(stopped)
		defer func() { _ = kw.Stop() }()
		for {
			select {
			case <-stop:
				return
			case e := <-kw.Updates():
				if e == nil {
					continue
				}
				var s agent.AppStatus
				if agent.DecodeStatus(e.Value(), &s) == nil {
					d := describe(&s)
					if !seen[d] {
						seen[d] = true
						order = append(order, d)
					}
				}
			}
		}
	}()
	if _, err := w.client.Sync(context.Background(), "eu", agent.SyncRequest{Apps: []string{"api"}, RunID: "r", Step: "s"}); err != nil {
		t.Fatal(err)
	}
	w.waitRecord("eu", "api", "Healthy", func(s *agent.AppStatus) bool { return s.Health == agent.HealthHealthy })
	time.Sleep(50 * time.Millisecond)
	close(stop)
	<-stopped
	joined := strings.Join(order, " → ")
	pend := strings.Index(joined, "OutOfSync/Missing/Pending@"+w.sha)
	succ := strings.Index(joined, "OutOfSync/Missing/Succeeded@"+w.sha)
	synced := strings.Index(joined, "Synced/")
	if pend < 0 || succ < 0 || synced < 0 || !(pend < succ && succ < synced) {
		t.Fatalf("phases not reported as Argo CD shows them (Pending, then Succeeded while still OutOfSync, then Synced):\n%s", joined)
	}
}

func TestStreamDroppedChangesMeanwhileNotMissed(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	w.addApp(app("api", "apps/api", nil), argocdtest.Deployed())
	a := w.start("eu", "r1")
	w.waitRecord("eu", "web", "web deployed", func(s *agent.AppStatus) bool { return s != nil && s.Sync == agent.SyncSynced })
	w.waitRecord("eu", "api", "api", func(s *agent.AppStatus) bool { return s != nil })
	w.eventually(5*time.Second, "stream open", func() bool { return w.argo.StreamCount() == 1 })
	connects := a.Connects()

	// Break the stream and keep it broken while Argo CD changes: a new commit (web and api
	// turn OutOfSync at the new revision), api deleted, a new app created.
	w.argo.InjectFault(argocdtest.Fault{Path: "/api/v1/stream/applications", Status: http.StatusServiceUnavailable, Times: -1})
	w.argo.DropStreams()
	w.eventually(5*time.Second, "stream closed", func() bool { return w.argo.StreamCount() == 0 })
	sha2 := w.git.Commit(repoURL, "main", map[string]string{"apps/web/cm.yaml": strings.Replace(healthyCM, "name: cfg", "name: cfg2", 1)})
	w.argo.Reconcile()
	if err := w.argo.DeleteApp("api"); err != nil {
		t.Fatal(err)
	}
	w.addApp(app("new", "apps/api", nil))
	// While the stream is down nothing can reach prflow-apps: the deleted app's record is
	// still there, the new one's is not.
	failing := func() int {
		n := 0
		for _, r := range w.argo.Requests() {
			if r.Path == "/api/v1/stream/applications" && r.Status == http.StatusServiceUnavailable {
				n++
			}
		}
		return n
	}
	w.eventually(5*time.Second, "two failed reconnects", func() bool { return failing() >= 2 })
	if w.record("eu", "api") == nil || w.record("eu", "new") != nil {
		t.Fatal("records changed while the agent had no stream: the test does not test reconnecting")
	}
	w.argo.ClearFaults()

	w.waitRecord("eu", "web", "web OutOfSync at the new commit", func(s *agent.AppStatus) bool {
		return s != nil && s.Sync == agent.SyncOutOfSync && s.Revision == sha2
	})
	w.waitRecord("eu", "new", "the app created meanwhile", func(s *agent.AppStatus) bool { return s != nil && s.Revision == sha2 })
	w.waitRecord("eu", "api", "the app deleted meanwhile to be gone", func(s *agent.AppStatus) bool { return s == nil })
	if a.Connects() <= connects {
		t.Fatalf("the agent did not reconnect (connects %d → %d)", connects, a.Connects())
	}
	// The inventory key tells waiting steps the set of apps changed.
	w.eventually(5*time.Second, "inventory updated", func() bool {
		e, err := w.b.Apps.Get(context.Background(), agent.InventoryKey("eu"))
		if err != nil {
			return false
		}
		var inv agent.Inventory
		return json.Unmarshal(e.Value(), &inv) == nil && inv.Apps == 2
	})
}

func TestRecordsWrittenOnlyWhenChanged(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	w.start("eu", "r1")
	w.waitRecord("eu", "web", "record", func(s *agent.AppStatus) bool { return s != nil && s.Sync == agent.SyncSynced })
	writes := w.countWrites()
	// A refresh changes reconciledAt and observedAt in Argo CD, nothing prflow reports.
	for i := 0; i < 3; i++ {
		w.argo.Reconcile()
	}
	w.argo.DropStreams() // and a reconnect re-lists everything
	w.eventually(5*time.Second, "stream reopened", func() bool { return w.argo.StreamCount() == 1 })
	if err := w.argo.SetHealth("web", argocdtest.HealthDegraded, "boom"); err != nil {
		t.Fatal(err)
	}
	w.waitRecord("eu", "web", "Degraded", func(s *agent.AppStatus) bool { return s.Health == agent.HealthDegraded && s.HealthMessage == "boom" })
	key := agent.StatusKey("eu", "web")
	w.eventually(5*time.Second, "the watcher to see the write", func() bool { return writes.get(key) >= 1 })
	time.Sleep(100 * time.Millisecond) // any further (wrong) write would show by now
	if n := writes.get(key); n != 1 {
		t.Fatalf("web's record was written %d times; only the health change should have been written:\n%s", n, strings.Join(writes.values(key), "\n"))
	}
}

func TestUnauthorizedToken(t *testing.T) {
	w := newWorld(t)
	const bad = "not-a-valid-token-4242"
	c, err := NewClient(ClientOptions{URL: w.argo.URL(), Token: bad})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{AgentID: "eu", Client: c, Log: w.log})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(context.Background(), w.conn)
	if !errors.Is(err, agent.ErrUnauthorized) || !strings.Contains(err.Error(), w.argo.URL()) ||
		!strings.Contains(err.Error(), "token was rejected") || strings.Contains(err.Error(), bad) {
		t.Fatalf("err = %v; want ErrUnauthorized naming Argo CD's URL, without the token", err)
	}
	if _, err := w.client.Registered(context.Background(), "eu"); !errors.Is(err, agent.ErrOffline) {
		t.Fatalf("an agent that could not start must not be registered: %v", err)
	}
}

func TestUnreachableArgoCD(t *testing.T) {
	w := newWorld(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	c, err := NewClient(ClientOptions{URL: addr, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := New(Options{AgentID: "eu", Client: c, Log: w.log})
	err = a.Run(context.Background(), w.conn)
	if !errors.Is(err, agent.ErrUnreachable) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("err = %v; want ErrUnreachable naming %s", err, addr)
	}
}

func TestBadOptionsNamed(t *testing.T) {
	cases := map[string]struct {
		o    ClientOptions
		want string
	}{
		"no url":      {ClientOptions{Token: "t"}, "URL is required"},
		"bad scheme":  {ClientOptions{URL: "ftp://x", Token: "t"}, "want http(s)://"},
		"credentials": {ClientOptions{URL: "https://u:secretpw@argo.example", Token: "t"}, "must not carry credentials"},
		"no token":    {ClientOptions{URL: "https://argo.example", Token: " \n"}, "token is empty"},
		"missing ca":  {ClientOptions{URL: "https://argo.example", Token: "t", CAFile: "/nonexistent/ca.pem"}, "CA file"},
	}
	for name, c := range cases {
		_, err := NewClient(c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "secretpw") {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
}

func TestSlowArgoCD(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil))
	w.start("eu", "r1", func(o *Options, c *Client) { c.Timeout = 300 * time.Millisecond })
	w.waitRecord("eu", "web", "record", func(s *agent.AppStatus) bool { return s != nil })

	// A call slower than the agent's timeout comes back as a timeout naming the call.
	w.argo.InjectFault(argocdtest.Fault{Method: http.MethodGet, Path: "/api/v1/applications/web", Delay: 2 * time.Second})
	rep, err := w.client.Sync(context.Background(), "eu", agent.SyncRequest{Apps: []string{"web"}, RunID: "r", Step: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if e := rep.Results[0].Error; !errors.Is(e, agent.ErrTimeout) || !strings.Contains(e.Message, "GET /api/v1/applications/web") {
		t.Fatalf("slow Argo CD: %+v", rep.Results[0])
	}
	// A slow stream (a buffering proxy) still delivers every change.
	w.argo.SetStreamDelay(50 * time.Millisecond)
	if _, err := w.client.Sync(context.Background(), "eu", agent.SyncRequest{Apps: []string{"web"}, RunID: "r", Step: "s2"}); err != nil {
		t.Fatal(err)
	}
	w.waitRecord("eu", "web", "Healthy through a slow stream", func(s *agent.AppStatus) bool {
		return s.Health == agent.HealthHealthy && s.Operation.Tagged("r", "s2")
	})
}

func TestIdleStreamIsReconnected(t *testing.T) {
	w := newWorld(t, argocdtest.WithKeepalive(0))
	w.addApp(app("web", "apps/web", nil))
	a := w.start("eu", "r1", func(o *Options, c *Client) { c.IdleTimeout = 150 * time.Millisecond })
	w.eventually(10*time.Second, "reconnects of a silent stream", func() bool { return a.Connects() >= 3 })
}

func TestRequestsToUnknownAgentFailFast(t *testing.T) {
	w := newWorld(t)
	w.client.Timeout = 5 * time.Minute // a NATS timeout would hang the test
	_, err := w.client.Sync(context.Background(), "nowhere", agent.SyncRequest{Apps: []string{"x"}})
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.Code != agent.CodeOffline || ae.Agent != "nowhere" || !strings.Contains(err.Error(), "--agent-id nowhere") {
		t.Fatalf("err = %v; want ErrOffline naming agent nowhere", err)
	}
}

func TestTwoReplicasOneWriterBothServe(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil), argocdtest.Deployed())
	r1 := w.start("eu", "r1")
	r2 := w.start("eu", "r2")
	w.eventually(5*time.Second, "a leader", func() bool { return r1.IsLeader() || r2.IsLeader() })
	leader, follower := r1, r2
	if r2.IsLeader() {
		leader, follower = r2, r1
	}
	w.waitRecord("eu", "web", "record", func(s *agent.AppStatus) bool { return s != nil })
	if follower.IsLeader() || follower.Writes() != 0 {
		t.Fatalf("both replicas write: follower leader=%v writes=%d", follower.IsLeader(), follower.Writes())
	}
	regs, err := w.client.Registered(context.Background(), "eu")
	if err != nil || len(regs) != 2 {
		t.Fatalf("registrations: %v %v", regs, err)
	}
	// Both serve requests (one queue group): 40 requests reach both.
	for i := 0; i < 40; i++ {
		if _, err := w.client.Apps(context.Background(), "eu", agent.AppsQuery{}); err != nil {
			t.Fatal(err)
		}
	}
	if leader.Served() == 0 || follower.Served() == 0 || leader.Served()+follower.Served() != 40 {
		t.Fatalf("served: leader %d, follower %d", leader.Served(), follower.Served())
	}
	// The leader stops cleanly: the follower takes over and reports the next change.
	if err := leader.stop(); err != nil {
		t.Fatal(err)
	}
	w.eventually(10*time.Second, "follower takes the lease", follower.IsLeader)
	if err := w.argo.SetHealth("web", argocdtest.HealthDegraded, "after handover"); err != nil {
		t.Fatal(err)
	}
	w.waitRecord("eu", "web", "change written by the new leader", func(s *agent.AppStatus) bool { return s.HealthMessage == "after handover" })
	if follower.Writes() == 0 {
		t.Fatal("the new leader wrote nothing")
	}
}

func TestSyncWhileAnotherOperationRuns(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil))
	w.start("eu", "r1")
	if err := w.argo.StartOperation("web", "alice", argocdtest.SyncScript{Hang: true}); err != nil {
		t.Fatal(err)
	}
	w.waitRecord("eu", "web", "alice's operation", func(s *agent.AppStatus) bool {
		return s != nil && s.Operation != nil && s.Operation.InitiatedBy == "alice" && s.Operation.Phase == agent.PhaseRunning
	})
	req := agent.SyncRequest{Apps: []string{"web"}, RunID: "run-1", Step: "dev/sync/1"}
	rep, err := w.client.Sync(context.Background(), "eu", req)
	if err != nil {
		t.Fatal(err)
	}
	if e := rep.Results[0].Error; !errors.Is(e, agent.ErrOperationInProgress) || !strings.Contains(e.Message, "user alice") {
		t.Fatalf("sync during alice's operation: %+v", rep.Results[0])
	}
	if err := w.argo.ReleaseOperation("web"); err != nil {
		t.Fatal(err)
	}
	w.waitRecord("eu", "web", "alice's operation done", func(s *agent.AppStatus) bool { return s.Operation.Finished() })
	// Ours now; asked twice (a redelivered job), it starts once.
	if err := w.argo.ScriptSync("web", argocdtest.SyncScript{Hold: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	first, err := w.client.Sync(context.Background(), "eu", req)
	if err != nil || first.Results[0].Error != nil || first.Results[0].AlreadyRunning {
		t.Fatalf("first: %v %+v", err, first)
	}
	again, err := w.client.Sync(context.Background(), "eu", req)
	if err != nil || again.Results[0].Error != nil || !again.Results[0].AlreadyRunning || again.Results[0].Revision != w.sha {
		t.Fatalf("repeated request must find the running operation: %v %+v", err, again)
	}
}

func TestAppsAndGet(t *testing.T) {
	w := newWorld(t)
	yes := true
	for _, n := range []string{"web-dev", "web-prod", "api-dev"} {
		a := app(n, "apps/web", map[string]string{"env": strings.Split(n, "-")[1], "svc": strings.Split(n, "-")[0]})
		if strings.HasPrefix(n, "web") {
			a.Metadata.OwnerReferences = []argocdtest.OwnerReference{{Kind: "ApplicationSet", Name: "web", Controller: &yes}}
		}
		w.addApp(a)
	}
	w.start("eu", "r1")
	ctx := context.Background()
	names := func(apps []agent.AppStatus) string {
		var out []string
		for _, a := range apps {
			out = append(out, a.Name)
		}
		return strings.Join(out, ",")
	}
	cases := []struct {
		q    agent.AppsQuery
		want string
	}{
		{agent.AppsQuery{}, "api-dev,web-dev,web-prod"},
		{agent.AppsQuery{Selector: "env=dev"}, "api-dev,web-dev"},
		{agent.AppsQuery{Labels: map[string]string{"env": "dev", "svc": "web"}}, "web-dev"},
		{agent.AppsQuery{ApplicationSet: "web"}, "web-dev,web-prod"},
		{agent.AppsQuery{NameRegex: "-prod$"}, "web-prod"},
		{agent.AppsQuery{Selector: "env in (dev)", ApplicationSet: "web"}, "web-dev"},
		{agent.AppsQuery{Names: []string{"api-dev", "nope"}}, "api-dev"},
	}
	for _, c := range cases {
		got, err := w.client.Apps(ctx, "eu", c.q)
		if err != nil || names(got) != c.want {
			t.Errorf("apps %+v = %s (%v), want %s", c.q, names(got), err, c.want)
		}
	}
	if _, err := w.client.Apps(ctx, "eu", agent.AppsQuery{NameRegex: "("}); !errors.Is(err, agent.ErrInvalid) || !strings.Contains(err.Error(), "nameRegex") {
		t.Errorf("bad regex: %v", err)
	}
	if _, err := w.client.Apps(ctx, "eu", agent.AppsQuery{Selector: "env in (dev"}); !errors.Is(err, agent.ErrInvalid) {
		t.Errorf("bad selector: %v", err)
	}
	st, err := w.client.Get(ctx, "eu", "web-dev", agent.RefreshHard)
	if err != nil || st.Name != "web-dev" || st.Revision != w.sha {
		t.Fatalf("get: %+v %v", st, err)
	}
	refreshed := false
	for _, r := range w.argo.Requests() {
		refreshed = refreshed || (r.Path == "/api/v1/applications/web-dev" && r.Query == "refresh=hard")
	}
	if !refreshed {
		t.Error("get with refresh hard did not ask Argo CD to refresh")
	}
	// Argo CD answers 403 for a missing app; the agent calls it what it is.
	_, err = w.client.Get(ctx, "eu", "ghost", "")
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.Code != agent.CodeNotFound || ae.App != "ghost" || ae.Agent != "eu" {
		t.Fatalf("missing app: %v", err)
	}
}

func TestProtocolVersionChecked(t *testing.T) {
	w := newWorld(t)
	w.start("eu", "r1")
	msg, err := w.conn.NC.Request(agent.Subject("eu", "apps"), []byte(`{"v":99}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep agent.AppsReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil || rep.Error == nil || rep.Error.Code != agent.CodeVersion {
		t.Fatalf("a request of an unknown version must be refused with %s: %s", agent.CodeVersion, msg.Data)
	}
	msg, err = w.conn.NC.Request(agent.Subject("eu", "sync"), []byte(`not json`), 5*time.Second)
	if err != nil || !strings.Contains(string(msg.Data), `"code":"invalid"`) {
		t.Fatalf("garbage request: %s %v", msg.Data, err)
	}
}

func TestMergeSyncOptions(t *testing.T) {
	got := MergeSyncOptions([]string{"PruneLast=true", "CreateNamespace=false", "ServerSideApply=true"},
		[]string{"CreateNamespace=true", "Validate=false"})
	want := "PruneLast=true,CreateNamespace=true,ServerSideApply=true,Validate=false"
	if strings.Join(got, ",") != want {
		t.Fatalf("merge = %v, want %s", got, want)
	}
}

func TestTLSWithCAFileAndInsecure(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil))
	// Argo CD behind TLS (a proxy with a self-signed certificate, as in many clusters).
	target, _ := url.Parse(w.argo.URL())
	proxy := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	proxy.Config.ErrorLog = stdlog.New(io.Discard, "", 0) // refused handshakes are the point
	proxy.StartTLS()
	defer proxy.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: proxy.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, c := range map[string]struct {
		o    ClientOptions
		want error
	}{
		"system roots only": {ClientOptions{URL: proxy.URL, Token: w.argo.Token()}, agent.ErrUnreachable},
		"with --argocd-ca":  {ClientOptions{URL: proxy.URL, Token: w.argo.Token(), CAFile: ca}, nil},
		"--argocd-insecure": {ClientOptions{URL: proxy.URL, Token: w.argo.Token(), Insecure: true}, nil},
	} {
		cl, err := NewClient(c.o)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Get(ctx, "web", "", "")
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v", name, err)
		}
		if c.want != nil && !strings.Contains(err.Error(), "certificate") {
			t.Errorf("%s: the error should say the certificate is the problem: %v", name, err)
		}
	}
}
