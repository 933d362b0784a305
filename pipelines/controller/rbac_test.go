package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/rbac"
)

// webStages is web's dev then prod promotion up to prod's steps, which webSrc and brokenSrc add.
const webStages = `
name: web
environments:
  - {name: dev}
  - {name: prod}
stages:
  - id: dev
    environment: dev
    steps: [{id: a, type: Noop}]
  - id: prod
    environment: prod
`

// webSrc promotes dev then prod; prod waits for an approval by alice, bob or carol.
const webSrc = webStages + `    steps:
      - {id: approve, type: Approval, timeout: 10m, with: {approvers: {users: [alice, bob, carol]}, message: go}}
`

// brokenSrc fails in prod (a run to retry and re-run).
const brokenSrc = webStages + `    steps: [{id: b, type: Boom}]
`

type rbacAPI struct {
	t   *testing.T
	e   *env
	srv *httptest.Server
	dir string
}

var rbacTokens = map[string]string{"alice": "alice-token-0123456", "bob": "bob-token-01234567", "carol": "carol-token-0123456", "dave": "dave-token-01234567"}

func newRBACAPI(t *testing.T) *rbacAPI {
	t.Helper()
	e := newEnv(t, envOpts{workers: 1})
	ctx := context.Background()
	if err := audit.Setup(ctx, e.conn.JS, 1, audit.DefaultRetention); err != nil {
		t.Fatal(err)
	}
	e.ctl.audit = &audit.Log{JS: e.conn.JS}
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("tokens:\n")
	for _, u := range []string{"alice", "bob", "carol", "dave"} {
		groups := map[string]string{"alice": "[release-managers]", "bob": "[developers]", "carol": "[developers]", "dave": "[]"}[u]
		fmt.Fprintf(&b, "  - {user: %s, groups: %s, token: sha256:%s}\n", u, groups, sha256hex(rbacTokens[u]))
	}
	if err := os.WriteFile(filepath.Join(dir, "tokens.yaml"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := LoadAuth(filepath.Join(dir, "tokens.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	a := &rbacAPI{t: t, e: e, dir: dir}
	a.srv = httptest.NewServer(e.ctl.Handler(auth))
	t.Cleanup(a.srv.Close)
	return a
}

// setPolicy puts text in force through the policy file (as prflow server --rbac does).
func (a *rbacAPI) setPolicy(text string) *rbac.File {
	a.t.Helper()
	path := filepath.Join(a.dir, "rbac.yaml")
	writePolicy(a.t, path, text)
	f, err := rbac.OpenFile(path, a.e.log)
	if err != nil {
		a.t.Fatal(err)
	}
	a.e.ctl.rbac = f
	return f
}

func writePolicy(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func (a *rbacAPI) call(user, method, path, body string) (int, string) {
	a.t.Helper()
	return callAPI(a.t, method, a.srv.URL+path, rbacTokens[user], body)
}

// waitEnd waits for run id to end with status want.
func (a *rbacAPI) waitEnd(id string, want pipelines.Status) {
	a.t.Helper()
	if r := a.e.wait(id, 30*time.Second); r.Status != want {
		a.t.Fatalf("run %s: %s, want %s", id, r.Status, want)
	}
}

// startAs starts src as user through the API.
func (a *rbacAPI) startAs(user, src string) *pipelines.Run {
	a.t.Helper()
	code, body := a.call(user, "POST", "/api/v1/runs", `{"file":"web.yaml","source":`+mustJSON(src)+`}`)
	if code != 201 {
		a.t.Fatalf("start as %s: %d %s", user, code, body)
	}
	var r pipelines.Run
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		a.t.Fatal(err)
	}
	return &r
}

// parked waits until run id's prod approval is parked.
func (a *rbacAPI) parked(id string) {
	a.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := a.e.ctl.Get(context.Background(), id)
		if err == nil && r.Stages[1].Steps[0].Status == pipelines.StWaiting {
			return
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("run %s never parked at its approval", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type forbidden struct {
	Error, User, Resource, Action, Object string
	Groups                                []string
}

// TestRBACEveryRouteRefused walks the OpenAPI document: every operation under /api/v1 has a
// route with a permission (or is public), and each is refused with 403 and a JSON error
// naming resource, action and object to a caller who may do everything but exactly that
// permission; a list leaves out what the caller may not get instead. Every refusal is in
// the audit log with the caller's name and groups.
func TestRBACEveryRouteRefused(t *testing.T) {
	t.Parallel()
	a := newRBACAPI(t)
	a.setPolicy("policy.csv: |\n  g, alice, role:admin\n")
	parked := a.startAs("alice", webSrc)
	a.parked(parked.ID)
	failed := a.startAs("alice", brokenSrc)
	a.waitEnd(failed.ID, pipelines.StFailed) // the broken run

	// The environment model is built from the runs' records as they are written: wait until it
	// shows prod before asking about it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, body := a.call("alice", "GET", "/api/v1/environments/prod", ""); code == 200 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("environment prod never listed: %d %s", code, body)
		}
	}

	// What each route is sent: path values and a body. A route missing here fails the test,
	// so a new route cannot go unchecked.
	type call struct{ path, body string }
	calls := map[string]call{
		"POST /api/v1/runs":                            {"/api/v1/runs", `{"file":"web.yaml","source":` + mustJSON(webSrc) + `}`},
		"GET /api/v1/runs":                             {"/api/v1/runs", ""},
		"GET /api/v1/runs/{id}":                        {"/api/v1/runs/" + parked.ID, ""},
		"POST /api/v1/runs/{id}/cancel":                {"/api/v1/runs/" + parked.ID + "/cancel", "{}"},
		"POST /api/v1/runs/{id}/rerun":                 {"/api/v1/runs/" + failed.ID + "/rerun", ""},
		"POST /api/v1/runs/{id}/retry":                 {"/api/v1/runs/" + failed.ID + "/retry", ""},
		"GET /api/v1/pipelines":                        {"/api/v1/pipelines", ""},
		"POST /api/v1/pipelines/{name}/runs":           {"/api/v1/pipelines/web/runs", `{}`},
		"POST /api/v1/runs/{id}/signals":               {"/api/v1/runs/" + parked.ID + "/signals", `{"stage":"prod","step":"approve","approve":true}`},
		"GET /api/v1/runs/{id}/logs":                   {"/api/v1/runs/" + parked.ID + "/logs", ""},
		"POST /api/v1/runs/{id}/interventions/{stage}": {"/api/v1/runs/" + parked.ID + "/interventions/prod", `{"action":"retry"}`},
		"GET /api/v1/workers":                          {"/api/v1/workers", ""},
		"GET /api/v1/audit":                            {"/api/v1/audit", ""},
		"POST /api/v1/pipelines/check":                 {"/api/v1/pipelines/check", `{"file":"web.yaml","source":` + mustJSON(webSrc) + `}`},
		"GET /api/v1/environments":                     {"/api/v1/environments", ""},
		"GET /api/v1/environments/{name}":              {"/api/v1/environments/prod", ""},
		"GET /api/v1/environments/{name}/history":      {"/api/v1/environments/prod/history", ""},
		"GET /api/v1/can-i":                            {"/api/v1/can-i?resource=runs&action=cancel&object=web/prod", ""},
	}
	routes := map[string]route{}
	for _, r := range a.e.ctl.routes() {
		routes[r.pattern] = r
	}
	var doc openAPIDoc
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for path, methods := range doc.Paths {
		for m := range methods {
			ops = append(ops, strings.ToUpper(m)+" "+path)
		}
	}
	slices.Sort(ops)
	checked := 0
	for _, op := range ops {
		if !strings.Contains(op, " /api/") {
			continue // probes, metrics and webhooks (authenticated by the forge) are not the API
		}
		rt, ok := routes[op]
		if !ok {
			t.Errorf("%s: documented but not a route", op)
			continue
		}
		if rt.public {
			if rt.perm != (perm{}) {
				t.Errorf("%s: public but has a permission", op)
			}
			continue
		}
		c, ok := calls[op]
		if !ok {
			t.Errorf("%s: no request in this test: add one so that its permission is checked", op)
			continue
		}
		p := rt.perm
		if p.object == objSelf {
			code, body := a.call("dave", "GET", c.path, "")
			if code != 200 || !strings.Contains(body, `"allowed": false`) {
				t.Errorf("%s as dave (no permission): %d %s", op, code, body)
			}
			continue
		}
		if p.resource == "" || p.action == "" || !slices.Contains(rbac.Actions[p.resource], p.action) {
			t.Errorf("%s: permission %+v is not a resource and one of its actions", op, p)
			continue
		}
		// bob may do everything except exactly this permission.
		a.setPolicy(fmt.Sprintf("policy.csv: |\n  g, alice, role:admin\n  p, bob, *, *, *, allow\n  p, bob, %s, %s, *, deny\n", p.resource, p.action))
		method, _, _ := strings.Cut(op, " ")
		code, body := a.call("bob", method, c.path, c.body)
		checked++
		if p.object == objList {
			if code != 200 {
				t.Errorf("%s: a list answers 200 with what may be seen, got %d %s", op, code, body)
			}
			for _, hidden := range []string{parked.ID, `"web"`, `"prod"`} {
				if strings.Contains(body, hidden) {
					t.Errorf("%s: bob may not %s %s but the list shows %s", op, p.action, p.resource, hidden)
				}
			}
			code, body = a.call("alice", method, c.path, c.body)
			if code != 200 || (!strings.Contains(body, `"web"`) && !strings.Contains(body, parked.ID)) {
				t.Errorf("%s as admin: %d %s", op, code, body)
			}
			continue
		}
		var f forbidden
		_ = json.Unmarshal([]byte(body), &f)
		if code != 403 || f.Resource != p.resource || f.Action != p.action || f.Object == "" || f.User != "bob" ||
			!strings.Contains(f.Error, fmt.Sprintf("bob (groups developers) may not %s %s %s", p.action, p.resource, f.Object)) {
			t.Errorf("%s without %s %s: got %d %s", op, p.resource, p.action, code, body)
		}
	}
	if checked < 15 {
		t.Fatalf("only %d routes checked", checked)
	}
	// Every refusal is audited with who (name and groups) and what.
	list, err := a.e.ctl.audit.Query(context.Background(), audit.Filter{Actions: []string{audit.RBACDenied}})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) < 12 {
		t.Fatalf("%d rbac.denied entries, want one per refused route", len(list))
	}
	for _, e := range list {
		if e.Actor != "bob" || !strings.Contains(e.Detail, "bob (groups developers) may not") {
			t.Errorf("audit entry %+v", e)
		}
	}
	// Nothing was done by the refused calls: the parked run still waits.
	if r, _ := a.e.ctl.Get(context.Background(), parked.ID); r.Status.Terminal() || len(r.Stages[1].Steps[0].Signals) > 0 {
		t.Fatalf("a refused call changed the run: %s %+v", r.Status, r.Stages[1].Steps[0].Signals)
	}
}

// TestRBACCancelOtherUsersRun: a run alice started waits in prod; bob, a developer who may
// cancel in dev only, is refused (403 naming runs, cancel, web/prod) and the run goes on;
// given cancel on web/prod he may.
func TestRBACCancelOtherUsersRun(t *testing.T) {
	t.Parallel()
	a := newRBACAPI(t)
	pol := "policy.default: role:readonly\npolicy.csv: |\n  g, alice, role:admin\n  p, role:dev, runs, *, */dev, allow\n  g, developers, role:dev\n"
	f := a.setPolicy(pol)
	r := a.startAs("alice", webSrc)
	a.parked(r.ID)
	code, body := a.call("bob", "POST", "/api/v1/runs/"+r.ID+"/cancel", "{}")
	var fb forbidden
	_ = json.Unmarshal([]byte(body), &fb)
	if code != 403 || fb.Resource != "runs" || fb.Action != "cancel" || fb.Object != "web/prod" {
		t.Fatalf("bob cancel: %d %s", code, body)
	}
	if got, _ := a.e.ctl.Get(context.Background(), r.ID); got.Status.Terminal() {
		t.Fatalf("refused cancel cancelled the run: %s", got.Status)
	}
	// bob still sees the run (role:readonly).
	if code, _ := a.call("bob", "GET", "/api/v1/runs/"+r.ID, ""); code != 200 {
		t.Fatalf("bob get: %d", code)
	}
	// Hot reload: the next request is decided by the edited file.
	writePolicy(t, f.Path(), pol+"  p, bob, runs, cancel, web/prod, allow\n")
	if code, body := a.call("bob", "POST", "/api/v1/runs/"+r.ID+"/cancel", "{}"); code != 202 {
		t.Fatalf("bob cancel with the permission: %d %s", code, body)
	}
	a.waitEnd(r.ID, pipelines.StCancelled)
}

// TestRBACStartAndListByEnvironment: a developer may start what deploys to dev only; a run
// that reaches prod is refused before anything is stored; lists show only what may be seen.
func TestRBACStartAndListByEnvironment(t *testing.T) {
	t.Parallel()
	a := newRBACAPI(t)
	a.setPolicy("policy.csv: |\n  g, alice, role:admin\n  p, role:dev, *, *, */dev, allow\n  g, developers, role:dev\n")
	devOnly := "name: api\nenvironments: [{name: dev}]\nstages:\n  - {id: dev, environment: dev, steps: [{id: a, type: Noop}]}\n"
	mine := a.startAs("bob", devOnly)
	before, _ := a.e.ctl.List(context.Background(), 100)
	code, body := a.call("bob", "POST", "/api/v1/runs", `{"file":"web.yaml","source":`+mustJSON(webSrc)+`}`)
	if code != 403 || !strings.Contains(body, `"object": "web/prod"`) || !strings.Contains(body, `"action": "start"`) {
		t.Fatalf("start through prod: %d %s", code, body)
	}
	after, _ := a.e.ctl.List(context.Background(), 100)
	if len(after) != len(before) {
		t.Fatal("a refused start stored a run")
	}
	theirs := a.startAs("alice", webSrc)
	code, body = a.call("bob", "GET", "/api/v1/runs", "")
	if code != 200 || !strings.Contains(body, mine.ID) || strings.Contains(body, theirs.ID) {
		t.Fatalf("bob's list: %d, want %s and not %s: %s", code, mine.ID, theirs.ID, body)
	}
	if code, body := a.call("bob", "GET", "/api/v1/runs/"+theirs.ID, ""); code != 403 || !strings.Contains(body, "web/prod") {
		t.Fatalf("bob get of a prod run: %d %s", code, body)
	}
	// can-i answers for the caller.
	for q, want := range map[string]string{
		"resource=runs&action=start&object=web/dev":  `"allowed": true`,
		"resource=runs&action=start&object=web/prod": `"allowed": false`,
		"resource=runs&action=fly&object=web/dev":    `resource runs takes get, start, cancel, retry`,
		"resource=runz&action=get&object=web/dev":    `resource \"runz\"`,
		"resource=runs&action=get&object=prod":       `want PIPELINE/ENV`,
		"resource=runs&action=get&object=a/b&x=1":    `unknown query parameter \"x\"`,
	} {
		if _, body := a.call("bob", "GET", "/api/v1/can-i?"+q, ""); !strings.Contains(body, want) {
			t.Errorf("can-i %s: %s, want %s", q, body, want)
		}
	}
}

// TestRBACApprovalsNeedBoth: approvals keep their approver lists on top of RBAC.
func TestRBACApprovalsNeedBoth(t *testing.T) {
	t.Parallel()
	a := newRBACAPI(t)
	a.setPolicy("policy.csv: |\n  g, alice, role:admin\n  p, role:dev, *, *, */dev, allow\n  g, developers, role:dev\n  p, dave, approvals, approve, */prod, allow\n  p, carol, approvals, approve, web/prod, deny\n")
	r := a.startAs("alice", webSrc)
	a.parked(r.ID)
	approve := `{"stage":"prod","step":"approve","approve":true}`
	// bob is an approver of the step, but RBAC does not let him approve in prod.
	if code, body := a.call("bob", "POST", "/api/v1/runs/"+r.ID+"/signals", approve); code != 403 || !strings.Contains(body, `"resource": "approvals"`) {
		t.Fatalf("bob: %d %s", code, body)
	}
	// dave may approve in prod by RBAC, but is not one of the step's approvers.
	if code, body := a.call("dave", "POST", "/api/v1/runs/"+r.ID+"/signals", approve); code != 403 || !strings.Contains(body, "dave is not an approver of step prod.approve") {
		t.Fatalf("dave: %d %s", code, body)
	}
	if got, _ := a.e.ctl.Get(context.Background(), r.ID); len(got.Stages[1].Steps[0].Signals) > 0 {
		t.Fatal("a refused decision was recorded")
	}
	if code, body := a.call("alice", "POST", "/api/v1/runs/"+r.ID+"/signals", approve); code != 202 {
		t.Fatalf("alice: %d %s", code, body)
	}
	a.waitEnd(r.ID, pipelines.StSucceeded)
}

// TestRBACReloadUnderLoad: requests keep being decided while the policy file flips and
// breaks (run with -race); afterwards the last good policy is in force.
func TestRBACReloadUnderLoad(t *testing.T) {
	t.Parallel()
	a := newRBACAPI(t)
	allow := "policy.csv: |\n  g, alice, role:admin\n  p, bob, runs, get, */*\n"
	deny := "policy.csv: |\n  g, alice, role:admin\n  p, bob, runs, start, */*\n"
	f := a.setPolicy(allow)
	r := a.startAs("alice", "name: api\nstages:\n  - {id: s, steps: [{id: a, type: Noop}]}\n")
	errs := make(chan string, 100)
	stop := repeatUntilStopped(4, func() bool {
		if code, body := a.call("bob", "GET", "/api/v1/runs/"+r.ID, ""); code != 200 && code != 403 {
			errs <- fmt.Sprint(code, body)
		}
		return true
	})
	for i := range 30 {
		text := allow
		switch i % 3 {
		case 1:
			text = deny
		case 2:
			text = "policy.csv: |\n  p, bob, runs\n" // broken: the last good one stays
		}
		writePolicy(t, f.Path(), text)
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	select {
	case e := <-errs:
		t.Fatalf("answer %s during reloads", e)
	default:
	}
	// A good edit seen by a request, then a broken one: the good one stays in force.
	writePolicy(t, f.Path(), deny)
	if code, _ := a.call("bob", "GET", "/api/v1/runs/"+r.ID, ""); code != 403 {
		t.Fatalf("the deny policy is not in force: %d", code)
	}
	writePolicy(t, f.Path(), "policy.csv: |\n  p, bob, runs\n")
	if code, _ := a.call("bob", "GET", "/api/v1/runs/"+r.ID, ""); code != 403 || f.Err() == nil || !strings.Contains(f.Err().Error(), ":2: want p, SUBJECT") {
		t.Fatalf("after a broken edit: %d, err %v", code, f.Err())
	}
	writePolicy(t, f.Path(), allow)
	if code, _ := a.call("bob", "GET", "/api/v1/runs/"+r.ID, ""); code != 200 {
		t.Fatalf("the fixed policy is not in force: %d", code)
	}
}
