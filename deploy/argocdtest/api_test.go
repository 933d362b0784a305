package argocdtest

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestContentTypeIsEnforcedBeforeAuthAndRouting(t *testing.T) {
	s, _, _ := newFake(t)
	if err := s.AddApp(demoApp("demo", "https://git.example/demo.git", "apps/demo")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, method, path, contentType, auth string
		want                                  int
	}{
		{"sync without content type", "POST", "/api/v1/applications/demo/sync", "", "ok", 415},
		{"delete without body or content type", "DELETE", "/api/v1/applications/demo", "", "ok", 415},
		{"terminate without content type", "DELETE", "/api/v1/applications/demo/operation", "", "ok", 415},
		{"charset parameter is not accepted", "POST", "/api/v1/applications/demo/sync", "application/json; charset=utf-8", "ok", 415},
		{"checked before authentication", "POST", "/api/v1/applications/demo/sync", "text/plain", "none", 415},
		{"checked before routing", "POST", "/api/v1/nonexistent", "", "ok", 415},
		{"GET needs no content type", "GET", "/api/v1/applications/demo", "", "ok", 200},
		{"upper case is fine", "POST", "/api/v1/applications/demo/sync", "Application/JSON", "ok", 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			auth := "Bearer " + s.Token()
			if tc.auth == "none" {
				auth = ""
			}
			r := call(t, s, tc.method, tc.path, nil, "Content-Type", tc.contentType, "Authorization", auth)
			if r.status != tc.want {
				t.Fatalf("status = %d, want %d (%s)", r.status, tc.want, r.body)
			}
			if tc.want == 415 {
				if string(r.body) != "Invalid content type\n" || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
					t.Fatalf("415 body %q content-type %q, want plain text 'Invalid content type'", r.body, r.header.Get("Content-Type"))
				}
			}
		})
	}
	// Let the operation started by the accepted sync finish before Close.
	waitApp(t, s, "demo", func(a Application) bool { return a.Operation == nil })
}

func forgeJWT(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc([]byte(claims)) + "." + enc([]byte("not-the-signature"))
}

func TestAuthentication(t *testing.T) {
	s, _, _ := newFake(t, WithToken("static-dev-token"), WithAccount("ci", "s3cret"))
	cases := []struct {
		name, auth, wantMsg string
		wantStatus          int
	}{
		{"no token", "", "no session information", 401},
		{"not a JWT is ignored like no token", "Bearer wrong", "no session information", 401},
		{"basic auth is not accepted", "Basic YWRtaW46eA==", "no session information", 401},
		{"JWT with a bad signature", "Bearer " + forgeJWT(`{"iss":"argocd","sub":"admin"}`), "invalid session: token signature is invalid: signature is invalid", 401},
		{"JWT from a foreign issuer", "Bearer " + forgeJWT(`{"iss":"https://idp.example","sub":"x"}`), "invalid session: SSO is not configured", 401},
		{"garbage with three segments", "Bearer a.b.c", "invalid session: token is malformed: could not base64 decode header", 401},
		{"admin JWT", "Bearer " + s.Token(), "", 200},
		{"static token", "Bearer static-dev-token", "", 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, "GET", "/api/v1/applications", nil, "Authorization", tc.auth)
			if tc.wantStatus == 200 {
				if r.status != 200 {
					t.Fatalf("status %d: %s", r.status, r.body)
				}
				return
			}
			wantError(t, r, tc.wantStatus, codeUnauthenticated, tc.wantMsg)
		})
	}

	t.Run("session login", func(t *testing.T) {
		r := call(t, s, "POST", "/api/v1/session", map[string]string{"username": "ci", "password": "wrong"}, "Authorization", "")
		wantError(t, r, 401, codeUnauthenticated, "Invalid username or password")
		r = call(t, s, "POST", "/api/v1/session", map[string]string{"username": "ci", "password": "s3cret"}, "Authorization", "")
		if r.status != 200 {
			t.Fatalf("login: %d %s", r.status, r.body)
		}
		var tok struct{ Token string }
		r.json(t, &tok)
		if tok.Token == "" || !strings.Contains(r.header.Get("Set-Cookie"), "argocd.token=") {
			t.Fatalf("login answer %s, cookie %q", r.body, r.header.Get("Set-Cookie"))
		}
		r = call(t, s, "GET", "/api/v1/session/userinfo", nil, "Authorization", "Bearer "+tok.Token)
		if !strings.Contains(string(r.body), `"username":"ci"`) || !strings.Contains(string(r.body), `"loggedIn":true`) {
			t.Fatalf("userinfo = %s", r.body)
		}
		// The cookie works as well as the header.
		req, _ := http.NewRequest("GET", s.URL()+"/api/v1/applications", nil)
		req.AddCookie(&http.Cookie{Name: "argocd.token", Value: tok.Token})
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("cookie auth: %d", res.StatusCode)
		}
	})

	t.Run("version is public but terse", func(t *testing.T) {
		r := call(t, s, "GET", "/api/version", nil, "Authorization", "")
		if r.status != 200 || string(r.body) != `{"Version":"`+Version+`"}` {
			t.Fatalf("anonymous version: %d %s", r.status, r.body)
		}
		var v VersionMessage
		call(t, s, "GET", "/api/version", nil).json(t, &v)
		if v.Version != Version || v.GoVersion == "" || v.Platform == "" {
			t.Fatalf("authenticated version lacks details: %+v", v)
		}
	})

	t.Run("requests record the user", func(t *testing.T) {
		s.ResetRequests()
		call(t, s, "GET", "/api/v1/applications", nil, "Authorization", "Bearer static-dev-token")
		call(t, s, "GET", "/api/v1/applications", nil, "Authorization", "")
		reqs := s.Requests()
		if len(reqs) != 2 || reqs[0].User != "admin" || reqs[0].Status != 200 || reqs[1].User != "" || reqs[1].Status != 401 {
			t.Fatalf("requests = %+v", reqs)
		}
	})
}

func TestMissingAppIsForbiddenNotNotFound(t *testing.T) {
	s, _, _ := newFake(t, WithProjects("payments"))
	app := demoApp("demo", "https://git.example/demo.git", "apps/demo")
	if err := s.AddApp(app); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, method, path string
		body               any
		status, code       int
		msg                string
	}{
		{"get", "GET", "/api/v1/applications/nope", nil, 403, codePermissionDenied, "permission denied"},
		{"sync", "POST", "/api/v1/applications/nope/sync", map[string]any{}, 403, codePermissionDenied, "permission denied"},
		{"delete", "DELETE", "/api/v1/applications/nope", nil, 403, codePermissionDenied, "permission denied"},
		{"terminate", "DELETE", "/api/v1/applications/nope/operation", nil, 403, codePermissionDenied, "permission denied"},
		{"get with project names it", "GET", "/api/v1/applications/nope?project=default", nil, 404, codeNotFound, `applications.argoproj.io "nope" not found`},
		{"existing app in another project", "GET", "/api/v1/applications/demo?projects=payments", nil, 404, codeNotFound, `applications.argoproj.io "demo" not found`},
		{"two projects", "GET", "/api/v1/applications/demo?projects=a&projects=b", nil, 400, codeInvalidArgument, "multiple projects specified - the get endpoint accepts either zero or one project"},
		{"missing appset is a plain 404", "GET", "/api/v1/applicationsets/nope", nil, 404, codeNotFound, `error getting ApplicationSet: applicationsets.argoproj.io "nope" not found`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, call(t, s, tc.method, tc.path, tc.body), tc.status, tc.code, tc.msg)
		})
	}
	t.Run("unknown routes", func(t *testing.T) {
		if r := call(t, s, "GET", "/api/v1/nothing", nil); r.status != 404 || string(r.body) != "Not Found\n" {
			t.Fatalf("unknown path: %d %q", r.status, r.body)
		}
		if r := call(t, s, "PUT", "/api/v1/applications/demo/sync", nil); r.status != 405 {
			t.Fatalf("wrong method: %d %q", r.status, r.body)
		}
	})
}

func TestListApplicationsFilters(t *testing.T) {
	s, mg, _ := newFake(t, WithProjects("payments"))
	other := "https://git.example/other.git"
	mg.Commit(other, "main", map[string]string{"x/cm.yaml": configMap("x", "healthy")})
	add := func(name, repo, project string, labels map[string]string) {
		a := demoApp(name, repo, "apps/demo")
		if repo == other {
			a.Spec.Source.Path = "x"
		}
		a.Spec.Project = project
		a.Metadata.Labels = labels
		if err := s.AddApp(a); err != nil {
			t.Fatal(err)
		}
	}
	add("pay-dev", "https://git.example/demo.git", "payments", map[string]string{"env": "dev", "tier": "1"})
	add("pay-prod", "https://git.example/demo.git", "payments", map[string]string{"env": "prod", "tier": "3"})
	add("web-dev", "https://git.example/demo.git", "default", map[string]string{"env": "dev"})
	add("other", other, "default", nil)

	list := func(t *testing.T, query string) []string {
		t.Helper()
		var l ApplicationList
		r := getJSON(t, s, "/api/v1/applications?"+query, "list "+query, &l)
		if l.Items == nil || l.Metadata.ResourceVersion == "" {
			t.Fatalf("list %s: items must be [] not null and carry a resourceVersion: %s", query, r.body)
		}
		var names []string
		for _, a := range l.Items {
			names = append(names, a.Metadata.Name)
		}
		return names
	}
	cases := []struct{ query, want string }{
		{"", "other,pay-dev,pay-prod,web-dev"},
		{"selector=env%3Ddev", "pay-dev,web-dev"},
		{"selector=env%3D%3Ddev", "pay-dev,web-dev"},
		{"selector=env!%3Ddev", "other,pay-prod"},
		{"selector=env+in+(prod,staging)", "pay-prod"},
		{"selector=env+notin+(prod)", "other,pay-dev,web-dev"},
		{"selector=tier", "pay-dev,pay-prod"},
		{"selector=!tier", "other,web-dev"},
		{"selector=tier>2", "pay-prod"},
		{"selector=env%3Ddev,tier", "pay-dev"},
		{"projects=payments", "pay-dev,pay-prod"},
		{"projects=payments&projects=default", "other,pay-dev,pay-prod,web-dev"},
		{"project=default&projects=payments", "other,web-dev"},
		{"name=web-dev", "web-dev"},
		{"repo=" + other, "other"},
		{"repo=https://git.example/other", ""}, // exact match only, no .git normalisation
		{"repo=https://git.example/other.git/", ""},
		{"appNamespace=elsewhere", ""},
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			if got := strings.Join(list(t, tc.query), ","); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("bad selector is a 500 like upstream", func(t *testing.T) {
		r := call(t, s, "GET", "/api/v1/applications?selector=env+in+(a", nil)
		if r.status != 500 || !strings.Contains(string(r.body), `"code":2`) || !strings.Contains(string(r.body), "error parsing the selector") {
			t.Fatalf("got %d %s", r.status, r.body)
		}
	})
	t.Run("fields trims the answer", func(t *testing.T) {
		r := call(t, s, "GET", "/api/v1/applications?name=web-dev&fields=items.metadata.name", nil)
		if string(r.body) != `{"items":[{"metadata":{"name":"web-dev"}}]}` {
			t.Fatalf("got %s", r.body)
		}
	})
}

func TestCreateAndDeleteApplication(t *testing.T) {
	s, _, sha := newFake(t)
	app := demoApp("created", "https://git.example/demo.git", "apps/demo")
	st := openStream(t, s, "name=created", "")

	bad := app
	bad.Spec.Source = &ApplicationSource{RepoURL: "https://git.example/demo.git", Path: "apps/missing", TargetRevision: "main"}
	r := call(t, s, "POST", "/api/v1/applications", bad)
	wantError(t, r, 400, codeInvalidArgument, "error while validating and normalizing app: application spec for created is invalid: "+
		"InvalidSpecError: Unable to generate manifests in apps/missing: rpc error: code = Unknown desc = apps/missing: app path does not exist")
	r = call(t, s, "POST", "/api/v1/applications?validate=false", bad)
	if r.status != 200 {
		t.Fatalf("validate=false must skip the repo check: %d %s", r.status, r.body)
	}
	if err := s.DeleteApp("created"); err != nil {
		t.Fatal(err)
	}

	noProject := app
	noProject.Spec.Project = "ghost"
	wantError(t, call(t, s, "POST", "/api/v1/applications", noProject), 403, codePermissionDenied,
		"error while validating and normalizing app: permission denied")
	noName := app
	noName.Metadata.Name = ""
	wantError(t, call(t, s, "POST", "/api/v1/applications", noName), 500, codeUnknown,
		"error while validating and normalizing app: resource name may not be empty")

	r = call(t, s, "POST", "/api/v1/applications", app)
	if r.status != 200 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var created Application
	r.json(t, &created)
	if created.Metadata.Namespace != "argocd" || created.Metadata.UID == "" || created.Status.Sync.Status != "" {
		t.Fatalf("created app should come back unreconciled in namespace argocd: %s", r.body)
	}
	// The controller reconciles it asynchronously.
	st.until(func(ev ApplicationWatchEvent) bool {
		s := ev.Application.Status
		return s.Sync.Status == SyncStatusOutOfSync && s.Health.Status == HealthMissing && s.Sync.Revision == sha
	})
	if r := call(t, s, "POST", "/api/v1/applications", app); r.status != 200 {
		t.Fatalf("re-creating an identical app is idempotent, got %d %s", r.status, r.body)
	}
	changed := app
	changed.Spec.Destination.Namespace = "other"
	wantError(t, call(t, s, "POST", "/api/v1/applications", changed), 400, codeInvalidArgument,
		"existing application spec is different, use upsert flag to force update")
	if r := call(t, s, "POST", "/api/v1/applications?upsert=true", changed); r.status != 200 {
		t.Fatalf("upsert: %d %s", r.status, r.body)
	}
	if a, _ := s.App("created"); a.Spec.Destination.Namespace != "other" || a.Metadata.Generation != 2 {
		t.Fatalf("upsert did not update spec/generation: %+v", a.Metadata)
	}

	wantError(t, call(t, s, "DELETE", "/api/v1/applications/created?cascade=false&propagationPolicy=foreground", nil),
		400, codeInvalidArgument, "cannot set propagation policy when cascading is disabled")
	wantError(t, call(t, s, "DELETE", "/api/v1/applications/created?propagationPolicy=sideways", nil),
		400, codeInvalidArgument, "invalid propagation policy: sideways")
	r = call(t, s, "DELETE", "/api/v1/applications/created", nil)
	if r.status != 200 || string(r.body) != "{}" {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	// Cascade: finalizer added, deletionTimestamp set, then DELETED.
	evs := st.until(func(ev ApplicationWatchEvent) bool { return ev.Type == EventDeleted })
	var sawFinalizer, sawTimestamp bool
	for _, ev := range evs {
		if contains(ev.Application.Metadata.Finalizers, "resources-finalizer.argocd.argoproj.io") {
			sawFinalizer = true
		}
		if ev.Type == EventModified && ev.Application.Metadata.DeletionTimestamp != nil {
			sawTimestamp = true
		}
	}
	if !sawFinalizer || !sawTimestamp {
		t.Fatalf("cascade delete should show the finalizer and a deletionTimestamp before DELETED")
	}
	if _, ok := s.App("created"); ok {
		t.Fatal("app still exists")
	}

	// Non-cascading delete is immediate.
	if err := s.AddApp(app); err != nil {
		t.Fatal(err)
	}
	if r := call(t, s, "DELETE", "/api/v1/applications/created?cascade=false", nil); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if _, ok := s.App("created"); ok {
		t.Fatal("cascade=false must delete at once")
	}
}

func TestFaultInjection(t *testing.T) {
	s, _, _ := newFake(t)
	if err := s.AddApp(demoApp("demo", "https://git.example/demo.git", "apps/demo")); err != nil {
		t.Fatal(err)
	}
	s.FailNext("/api/v1/applications/demo", http.StatusServiceUnavailable)
	wantError(t, call(t, s, "GET", "/api/v1/applications/demo", nil), 503, codeUnavailable, "Service Unavailable")
	if r := call(t, s, "GET", "/api/v1/applications/demo", nil); r.status != 200 {
		t.Fatalf("fault should apply once, got %d", r.status)
	}
	s.InjectFault(Fault{Method: "POST", Path: "/api/v1/applications/*", Status: 502, Message: "upstream connect error", Times: 2})
	for i := 0; i < 2; i++ {
		wantError(t, call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{}), 502, codeUnavailable, "upstream connect error")
	}
	if r := call(t, s, "GET", "/api/v1/applications/demo", nil); r.status != 200 {
		t.Fatalf("GET is not matched by a POST fault: %d", r.status)
	}
	s.InjectFault(Fault{Path: "/api/v1/applications", Status: 500, Times: -1})
	for i := 0; i < 3; i++ {
		if r := call(t, s, "GET", "/api/v1/applications", nil); r.status != 500 {
			t.Fatalf("persistent fault: %d", r.status)
		}
	}
	s.ClearFaults()
	if r := call(t, s, "GET", "/api/v1/applications", nil); r.status != 200 {
		t.Fatalf("after ClearFaults: %d", r.status)
	}
	count := 0
	for _, r := range s.Requests() {
		if r.Method == "POST" && r.Path == "/api/v1/applications/demo/sync" && r.Status == 502 {
			count++
		}
	}
	if count != 2 {
		t.Fatalf("request log counted %d failed syncs, want 2", count)
	}
}

func TestAppNamespacesAndPeriodicReconcile(t *testing.T) {
	s, mg, _ := newFake(t, WithAppNamespaces("team-a"), WithReconcileInterval(5*time.Millisecond))
	app := demoApp("demo", demoRepo, "apps/demo")
	app.Metadata.Namespace = "team-a"
	app.Spec.SyncPolicy = &SyncPolicy{Automated: &SyncPolicyAutomated{}}
	if err := s.AddApp(app); err != nil {
		t.Fatal(err)
	}
	blocked := demoApp("blocked", demoRepo, "apps/demo")
	blocked.Metadata.Namespace = "team-b"
	if err := s.AddApp(blocked); err == nil {
		t.Fatal("AddApp into a namespace that is not enabled must fail")
	}
	wantError(t, call(t, s, "GET", "/api/v1/applications/demo", nil), 403, codePermissionDenied, "permission denied")
	if a := getApp(t, s, "demo?appNamespace=team-a"); a.Metadata.Namespace != "team-a" {
		t.Fatalf("namespace %q", a.Metadata.Namespace)
	}
	var l ApplicationList
	call(t, s, "GET", "/api/v1/applications?appNamespace=team-a", nil).json(t, &l)
	if len(l.Items) != 1 {
		t.Fatalf("list in team-a: %d items", len(l.Items))
	}
	// No Reconcile call: the periodic reconciliation picks the commit up and
	// auto-syncs it.
	sha2 := mg.Commit(demoRepo, "main", map[string]string{"apps/demo/cm.yaml": configMap("demo", "suspended")})
	a := waitApp(t, s, "team-a/demo", func(a Application) bool {
		return a.Status.Sync.Status == SyncStatusSynced && a.Status.Sync.Revision == sha2 && a.Status.Health.Status == HealthSuspended
	})
	if !a.Status.OperationState.Operation.InitiatedBy.Automated {
		t.Fatal("expected an automated sync")
	}
	login := call(t, s, "POST", "/api/v1/session", map[string]string{"username": "admin", "password": s.AdminPassword()}, "Authorization", "")
	if login.status != 200 {
		t.Fatalf("admin login: %d %s", login.status, login.body)
	}
	for _, r := range s.Requests() {
		if strings.Contains(string(r.Body), s.AdminPassword()) {
			t.Fatal("request log holds a password")
		}
	}
}
