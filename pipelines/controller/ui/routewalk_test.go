package ui_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

// uiRoute is one route registered in ui.go: its pattern and the handler expression's text.
type uiRoute struct{ pattern, handler string }

// uiRoutes reads the routes ui.go registers on its mux (mux.Handle / mux.HandleFunc with a
// literal pattern), so that a route added there is walked below without anyone listing it.
func uiRoutes(t *testing.T) []uiRoute {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "ui.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	src, _ := os.ReadFile("ui.go")
	var out []uiRoute
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) != 2 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
			return true
		}
		lit, ok := call.Args[0].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			t.Errorf("%s: a route whose pattern is not a literal cannot be walked", fset.Position(call.Pos()))
			return true
		}
		p, _ := strconv.Unquote(lit.Value)
		h := string(src[fset.Position(call.Args[1].Pos()).Offset:fset.Position(call.Args[1].End()).Offset])
		out = append(out, uiRoute{p, h})
		return true
	})
	if len(out) < 10 {
		t.Fatalf("found %d routes in ui.go: the walk no longer understands how routes are registered", len(out))
	}
	return out
}

// Routes that change state without action(): the sign-in form itself (there is no session
// yet: the token or the provider's code is the proof) and sign-out (it only ends the caller's
// own session; the cookie is SameSite=Strict).
var noAction = map[string]string{
	"POST /ui/login":  "sign-in: no session yet",
	"POST /ui/logout": "ends only the caller's own session",
}

// TestUIRouteWalk: every state-changing UI route (any method but GET) registered in ui.go
// goes through action() (a session, same origin, the session's CSRF token) and checks RBAC:
// walked against a running server, each is refused without the CSRF token, refused from
// another origin, and refused with a 403 naming the missing permission (audited as
// rbac.denied) for a signed-in user with a valid CSRF token and no permission. A new POST
// route needs a row here, so it cannot be added without this check.
func TestUIRouteWalk(t *testing.T) {
	t.Parallel()
	// bob (group dev) has no role and there is no default role: he may do nothing.
	e, _ := newRBACUIEnv(t, "policy.csv: |\n  g, release, role:admin\n")
	ctx := context.Background()
	parked := startWebAsAlice(t, e)
	done := startWebAsAlice(t, e)
	if err := e.Ctl.Cancel(ctx, done.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	e.Wait(done.ID, 30*time.Second)

	// What each state-changing route is walked with: the run it acts on, its form and the
	// permission a refusal must name (several forms for a route that checks differently).
	type form struct {
		run    string
		values url.Values
		want   string
	}
	table := map[string][]form{
		"POST /ui/runs/{id}/cancel": {{parked.ID, url.Values{}, "may not cancel runs web/"}},
		"POST /ui/runs/{id}/decide": {
			{parked.ID, url.Values{"stage": {"prod"}, "step": {"approve"}, "decision": {"approve"}}, "may not approve approvals web/prod"},
			{parked.ID, url.Values{"stage": {"prod"}, "step": {"approve"}, "decision": {"reject"}}, "may not approve approvals web/prod"},
		},
		"POST /ui/runs/{id}/intervene": {{parked.ID, url.Values{"stage": {"prod"}, "action": {"abort"}}, "may not approve"}},
		"POST /ui/runs/{id}/rerun": {
			{done.ID, url.Values{}, "may not start runs web/"},
			{done.ID, url.Values{"rollback": {"prod"}}, "may not rollback environments web/prod"},
		},
		"POST /ui/runs/{id}/retry": {{done.ID, url.Values{}, "may not retry runs web/"}},
		"POST /ui/promote":         {{"", url.Values{"pipeline": {"web"}}, "may not start runs web/"}},
	}

	c, csrf, _ := signInHTTP(t, e, bobToken, "/ui/")
	log := &audit.Log{JS: e.Conn.JS}
	walked := map[string]bool{}
	for _, rt := range uiRoutes(t) {
		method, p, ok := strings.Cut(rt.pattern, " ")
		if !ok { // no method: only the delegation of the API and of the UI's own subtree
			if rt.pattern != "/" && rt.pattern != "/ui/" {
				t.Errorf("%s: a route for every method; give it GET or POST", rt.pattern)
			}
			continue
		}
		if method == "GET" {
			continue
		}
		if method != "POST" {
			t.Errorf("%s: a state-changing method other than POST; add it to this walk", rt.pattern)
			continue
		}
		if why, ok := noAction[rt.pattern]; ok {
			if strings.Contains(rt.handler, "u.action(") {
				t.Errorf("%s is listed as not needing action() (%s) but uses it: remove it from noAction", rt.pattern, why)
			}
			continue
		}
		if !strings.HasPrefix(rt.handler, "u.action(") {
			t.Errorf("%s: handler %s does not go through u.action() (session, same origin, CSRF)", rt.pattern, rt.handler)
			continue
		}
		forms, ok := table[rt.pattern]
		if !ok {
			t.Errorf("%s: a state-changing UI route this walk has no form for; add its RBAC check and a row to the table", rt.pattern)
			continue
		}
		walked[rt.pattern] = true
		for i, fm := range forms {
			target := e.URL + strings.Replace(p, "{id}", fm.run, 1)
			if i == 0 {
				// No CSRF token: refused by action() before anything else.
				if code, _, body := do(t, c, "POST", target, fm.values, nil); code != http.StatusForbidden || !strings.Contains(body, "CSRF token does not match") {
					t.Errorf("%s without a CSRF token: %d %.300s", rt.pattern, code, body)
				}
				// Another site's form, with a valid token: refused by origin.
				v := cloneWith(fm.values, csrf)
				if code, _, body := do(t, c, "POST", target, v, map[string]string{"Origin": "https://evil.example"}); code != http.StatusForbidden || !strings.Contains(body, "cross-site request refused") {
					t.Errorf("%s from another origin: %d %.300s", rt.pattern, code, body)
				}
			}
			before, err := log.Query(ctx, audit.Filter{Actions: []string{audit.RBACDenied}})
			if err != nil {
				t.Fatal(err)
			}
			code, _, body := do(t, c, "POST", target, cloneWith(fm.values, csrf), map[string]string{"Origin": e.URL})
			if code != http.StatusForbidden || !strings.Contains(body, fm.want) {
				t.Errorf("%s %v as bob (no permission): %d, want 403 with %q:\n%.600s", rt.pattern, fm.values, code, fm.want, body)
				continue
			}
			after, err := log.Query(ctx, audit.Filter{Actions: []string{audit.RBACDenied}})
			if err != nil {
				t.Fatal(err)
			}
			if len(after) <= len(before) {
				t.Errorf("%s %v: refused without an rbac.denied audit entry", rt.pattern, fm.values)
			}
		}
	}
	for p := range table {
		if !walked[p] {
			t.Errorf("table row %s: no such state-changing route in ui.go", p)
		}
	}
	// Nothing bob sent changed a run.
	if cur, _ := e.Ctl.Get(ctx, parked.ID); cur.Status.Terminal() || len(ctltest.Step(cur, "prod", "approve").Signals) != 0 {
		t.Fatalf("a refused form changed the run: %s", cur.Status)
	}
	if runs, _ := e.Ctl.List(ctx, 100); len(runs) != 2 {
		t.Fatalf("refused forms started runs: %d runs, want 2", len(runs))
	}
}

func cloneWith(v url.Values, csrf string) url.Values {
	out := url.Values{"csrf": {csrf}}
	for k, vs := range v {
		out[k] = vs
	}
	return out
}
