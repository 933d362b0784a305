package argocd

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocdtest"
)

// Issue 32 A: Argo CD answers a sync with HTTP 400 "error resolving repo revision: … code =
// Unavailable … connection refused" while its repo-server is down. That is Argo CD unable to
// work right now, not a refused request: it reaches the step as CodeUnavailable (transient).
func TestSyncWhileRepoServerDownIsUnavailable(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil))
	w.start("eu", "r1")
	w.argo.SetRepoServerDown(true)
	rep, err := w.client.Sync(context.Background(), "eu", agent.SyncRequest{Apps: []string{"web"}, RunID: "r", Step: "s"})
	if err != nil {
		t.Fatal(err)
	}
	e := rep.Results[0].Error
	if e == nil || !errors.Is(e, agent.ErrUnavailable) || !agent.Transient(e) {
		t.Fatalf("sync while the repo-server is down: %+v, want a transient CodeUnavailable", e)
	}
	for _, want := range []string{"HTTP 400", "code = Unavailable", "connection refused", "cannot work right now"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("message %q lacks %q", e.Message, want)
		}
	}
	if a, _ := w.argo.App("web"); a.Operation != nil || a.Status.OperationState != nil {
		t.Fatalf("an operation was started while the repo-server was down: %+v", a.Operation)
	}
	// Back 2 s later (here: at once): the same request succeeds.
	w.argo.SetRepoServerDown(false)
	rep, err = w.client.Sync(context.Background(), "eu", agent.SyncRequest{Apps: []string{"web"}, RunID: "r", Step: "s"})
	if err != nil || rep.Results[0].Error != nil {
		t.Fatalf("sync after the repo-server is back: %v %+v", err, rep.Results[0].Error)
	}
}

// The classification of Argo CD's error answers, in the shapes the real server sends.
func TestStatusErrorClassification(t *testing.T) {
	const unavail = `error resolving repo revision: rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:8081: connect: connection refused"`
	cases := []struct {
		name   string
		status int
		body   string
		want   *agent.Error
	}{
		{"repo-server down (400, FailedPrecondition)", 400, `{"error":"x","code":9,"message":` + quote(unavail) + `}`, agent.ErrUnavailable},
		{"repo-server slow", 400, `{"code":9,"message":"error resolving repo revision: rpc error: code = DeadlineExceeded desc = context deadline exceeded"}`, agent.ErrUnavailable},
		{"redis down", 500, `{"code":2,"message":"error getting cached app state: redis: connection pool timeout"}`, agent.ErrUnavailable},
		{"gRPC Unavailable (503 from Argo CD)", 503, `{"code":14,"message":"connection closed"}`, agent.ErrUnavailable},
		{"internal error (500 from Argo CD)", 500, `{"code":13,"message":"error getting application: etcdserver: leader changed"}`, agent.ErrUnavailable},
		{"proxy 502 without Argo CD's body", 502, `<html>Bad Gateway</html>`, agent.ErrUnreachable},
		{"bad revision stays refused", 400, `{"code":9,"message":"error resolving repo revision: rpc error: code = Unknown desc = Unable to resolve 'nope' to a commit SHA"}`, agent.ErrRejected},
		{"operation in progress", 400, `{"code":9,"message":"error setting app operation: another operation is already in progress"}`, agent.ErrOperationInProgress},
		{"bad selector stays the caller's mistake (a 500 on Argo CD)", 500, `{"code":2,"message":"error parsing the selector: invalid label selector"}`, agent.ErrInvalid},
		{"not implemented", 501, `{"code":12,"message":"method not implemented"}`, agent.ErrInternal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(c.body))
			}))
			defer srv.Close()
			cl, err := NewClient(ClientOptions{URL: srv.URL, Token: "t"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = cl.Sync(context.Background(), SyncBody{Name: "web"})
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v (%T), want code %s", err, err, c.want.Code)
			}
			if strings.Contains(err.Error(), "Bearer") {
				t.Fatal("the token reached the error")
			}
		})
	}
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// The fake's injected faults carry the gRPC code given (as Argo CD's wrapped errors do).
func TestFaultWithGRPCCode(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil))
	w.argo.InjectFault(argocdtest.Fault{Method: "POST", Path: "/api/v1/applications/web/sync", Status: 400, Code: 9,
		Message: "error resolving repo revision: rpc error: code = Unavailable desc = connection refused"})
	cl, err := NewClient(ClientOptions{URL: w.argo.URL(), Token: w.argo.Token()})
	if err != nil {
		t.Fatal(err)
	}
	cl.Timeout = 5 * time.Second
	if _, err := cl.Sync(context.Background(), SyncBody{Name: "web"}); !errors.Is(err, agent.ErrUnavailable) {
		t.Fatalf("err = %v, want CodeUnavailable", err)
	}
}

// While the repo-server is down a refreshed ApplicationSet cannot regenerate: Argo CD keeps the
// refresh annotation and reports the failure in an ErrorOccurred condition. The agent stops
// waiting once that condition says Argo CD cannot work (instead of for its whole bound, 20 s by
// default, paid by FetchLinkedApps and by every rollback), and says why. Once the repo-server
// is back a refresh completes again.
func TestAppSetRefreshStopsWaitingWhenRepoServerDown(t *testing.T) {
	w := newWorld(t)
	set := gitFilesAppSet("apps", "apps/*/cm.yaml", "set-{{path.basename}}", argocdtest.ApplicationSpec{Project: "default",
		Source:      &argocdtest.ApplicationSource{RepoURL: repoURL, Path: "{{path}}", TargetRevision: "main"},
		Destination: argocdtest.ApplicationDestination{Server: "https://kubernetes.default.svc", Namespace: "shop"}})
	if err := w.argo.AddApplicationSet(set); err != nil {
		t.Fatal(err)
	}
	// A bound the test would notice: without the early stop the reply says only "not done".
	w.start("eu", "r1", func(o *Options, _ *Client) { o.AppSetRefresh.Wait = 15 * time.Second })
	w.argo.SetRepoServerDown(true)
	req := agent.RefreshRequest{ApplicationSet: "apps", Wait: true}
	rep, err := w.client.RefreshAppSets(context.Background(), "eu", req)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Done || !strings.Contains(rep.Unavailable, "ApplicationSet argocd/apps") || !strings.Contains(rep.Unavailable, "code = Unavailable") {
		t.Fatalf("refresh while the repo-server is down: %+v", rep)
	}
	if as, _ := w.argo.ApplicationSet("apps"); as.Metadata.Annotations[argocdtest.AppSetRefreshAnnotation] == "" {
		t.Fatal("the fake dropped the refresh annotation after a failed generation (Argo CD keeps it)")
	}
	w.argo.SetRepoServerDown(false)
	w.eventually(10*time.Second, "the set generated again", func() bool {
		as, _ := w.argo.ApplicationSet("apps")
		return as.Metadata.Annotations[argocdtest.AppSetRefreshAnnotation] == ""
	})
	rep, err = w.client.RefreshAppSets(context.Background(), "eu", req)
	if err != nil || !rep.Done || rep.Unavailable != "" {
		t.Fatalf("refresh after the repo-server is back: %+v %v", rep, err)
	}
}
