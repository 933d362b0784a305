package ui

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/rbac"
	"github.com/prflow/prflow/steps/worker"
)

// PageSize is how many runs the runs page shows at a time.
const PageSize = 25

type runRow struct {
	*controller.RunSummary
	Duration string
	Trigger  triggerView
}

// runsPage lists runs newest first from the controller's runs index, a page at a time: the
// "older" link carries the cursor of the page's oldest run, so runs that start while someone
// pages never show twice or push others out of sight. Runs waiting for an approval are what
// someone has to act on: the first page shows them above the others (PageSize at most, with
// a link to all of them), and the pages leave them out of the newest-first list.
func (u *UI) runsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	pipeline, status, cursor := q.Get("pipeline"), q.Get("status"), q.Get("cursor")
	if status != "" && !slices.Contains(controller.RunStatusFilters, status) {
		u.fail(w, r, http.StatusBadRequest, fmt.Sprintf("status filter %q: want one of %s", status, strings.Join(controller.RunStatusFilters, ", ")))
		return
	}
	ctx, user := r.Context(), userOf(r.Context())
	mayGet := func(s *controller.RunSummary) bool { return u.ctl.CanGetSummary(ctx, user, s) } // rbac.go
	names, err := u.ctl.RunPipelines(ctx, mayGet)
	if err != nil {
		u.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	// Approvals are pinned unless the filter already is them or leaves them out.
	pin := status == "" || status == "active" || status == "waiting"
	var pinned []*controller.RunSummary
	waitingApprovals := 0
	if pin && cursor == "" {
		pinned, waitingApprovals, err = u.approvals(ctx, pipeline, mayGet)
		if err != nil {
			u.fail(w, r, http.StatusInternalServerError, err.Error())
			return
		}
	}
	keep := mayGet
	if pin {
		keep = func(s *controller.RunSummary) bool { return s.Status != pipelines.StWaitingApproval && mayGet(s) }
	}
	page, err := u.ctl.ListRuns(ctx, controller.ListOptions{Limit: PageSize, Cursor: cursor, Pipeline: pipeline, Status: status, Keep: keep})
	if errors.Is(err, controller.ErrBadCursor) {
		u.fail(w, r, http.StatusBadRequest, err.Error()+": start again from the newest runs")
		return
	}
	if err != nil {
		u.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	rows := make([]runRow, 0, len(pinned)+len(page.Runs))
	now := time.Now()
	for _, run := range append(pinned, page.Runs...) {
		rows = append(rows, runRow{RunSummary: run, Duration: duration(run.Started, run.Ended, now), Trigger: trigger(run.Trigger)})
	}
	link := func(cursor string) string {
		v := url.Values{}
		for k, x := range map[string]string{"pipeline": pipeline, "status": status, "cursor": cursor} {
			if x != "" {
				v.Set(k, x)
			}
		}
		if len(v) == 0 {
			return "/ui/"
		}
		return "/ui/?" + v.Encode()
	}
	data := map[string]any{"Title": "Runs", "Nav": "runs", "Rows": rows, "Pipelines": names, "Pipeline": pipeline, "Status": status,
		"Statuses": controller.RunStatusFilters, "Pinned": len(pinned)}
	if waitingApprovals > len(pinned) {
		v := url.Values{"status": {"waitingApproval"}}
		if pipeline != "" {
			v.Set("pipeline", pipeline)
		}
		data["MoreApprovals"], data["ApprovalsLink"] = waitingApprovals, "/ui/?"+v.Encode()
	}
	if cursor != "" {
		data["Newest"] = link("")
	}
	if page.Next != "" {
		data["Older"] = link(page.Next)
	}
	u.render(w, r, http.StatusOK, "runs", data)
}

// approvals returns the runs waiting for an approval that the user may see, newest first:
// the first PageSize of them and how many there are.
func (u *UI) approvals(ctx context.Context, pipeline string, keep func(*controller.RunSummary) bool) ([]*controller.RunSummary, int, error) {
	var first []*controller.RunSummary
	n := 0
	cursor := ""
	for {
		page, err := u.ctl.ListRuns(ctx, controller.ListOptions{Limit: controller.MaxRunsLimit, Cursor: cursor, Pipeline: pipeline, Status: "waitingApproval", Keep: keep})
		if err != nil {
			return nil, 0, err
		}
		for _, s := range page.Runs {
			if len(first) < PageSize {
				first = append(first, s)
			}
			n++
		}
		if cursor = page.Next; cursor == "" {
			return first, n, nil
		}
	}
}

func (u *UI) runPage(w http.ResponseWriter, r *http.Request) {
	run, ok := u.readableRun(w, r, false) // rbac.go
	if !ok {
		return
	}
	data := map[string]any{"Title": "Run " + run.ID, "Nav": "runs", "Run": u.runView(r.Context(), run, sessionFrom(r.Context()))}
	if m := r.URL.Query().Get("msg"); m != "" {
		data["Flash"] = m
	}
	u.render(w, r, http.StatusOK, "run", data)
}

func (u *UI) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s := sessionFrom(r.Context())
	// RBAC before the cancel (the API checks the same): a forged form gets a 403 page.
	if run, err := u.ctl.Get(r.Context(), id); err == nil && !u.authorize(w, r, id, rbac.Runs, rbac.Cancel, u.ctl.RunObjects(r.Context(), run, rbac.Cancel)...) {
		return
	}
	var replayed bool
	var err error
	if key := r.PostFormValue("idem"); key != "" {
		replayed, err = u.ctl.CancelOnce(r.Context(), id, s.user.Name, key)
	} else {
		err = u.ctl.Cancel(r.Context(), id, s.user.Name)
	}
	if err != nil {
		code := http.StatusConflict
		switch {
		case errors.Is(err, controller.ErrNotFound):
			code = http.StatusNotFound
		case errors.Is(err, controller.ErrInvalid):
			code = http.StatusBadRequest
		case errors.Is(err, controller.ErrKeyReused):
			code = http.StatusUnprocessableEntity
		}
		u.fail(w, r, code, "cancel run "+id+": "+err.Error())
		return
	}
	msg := "cancel requested by " + s.user.Name
	if replayed {
		msg += " (this form was sent before: requested once)"
	}
	http.Redirect(w, r, "/ui/runs/"+id+"?msg="+urlq(msg), http.StatusSeeOther)
}

func (u *UI) decide(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s := sessionFrom(r.Context())
	dec := r.PostFormValue("decision")
	if dec != "approve" && dec != "reject" {
		u.fail(w, r, http.StatusBadRequest, fmt.Sprintf("decision: want approve or reject, got %q", dec))
		return
	}
	req := controller.SignalRequest{Stage: r.PostFormValue("stage"), Step: r.PostFormValue("step"), Rollback: r.PostFormValue("rollback") == "true",
		Approve: dec == "approve", Comment: strings.TrimSpace(r.PostFormValue("comment"))}
	var replayed bool
	var err error
	if key := r.PostFormValue("idem"); key != "" {
		replayed, err = u.ctl.DecideOnce(r.Context(), id, req, s.user, key)
	} else {
		err = u.ctl.Decide(r.Context(), id, req, s.user)
	}
	if err != nil {
		code := http.StatusInternalServerError
		var de *controller.DecisionError
		switch {
		case errors.As(err, &de):
			code = de.Code
		case errors.Is(err, controller.ErrInvalid):
			code = http.StatusBadRequest
		case errors.Is(err, controller.ErrKeyReused):
			code = http.StatusUnprocessableEntity
		}
		u.fail(w, r, code, fmt.Sprintf("%s step %s.%s of run %s: %v", dec, req.Stage, req.Step, id, err))
		return
	}
	verb := map[string]string{"approve": "approved", "reject": "rejected"}[dec]
	msg := fmt.Sprintf("%s.%s %s by %s", req.Stage, req.Step, verb, s.user.Name)
	if replayed {
		msg += " (this form was sent before: recorded once)"
	}
	http.Redirect(w, r, "/ui/runs/"+id+"?msg="+urlq(msg), http.StatusSeeOther)
}

func asList(v any) []any { l, _ := v.([]any); return l }

type workerRow struct {
	worker.Info
	Age   string
	Stale bool
}

type agentRow struct {
	agent.Registration
	Age   string
	Stale bool
}

func (u *UI) workersPage(w http.ResponseWriter, r *http.Request) {
	if !u.authorize(w, r, "", rbac.Pipelines, rbac.Get, "*") { // as GET /api/v1/workers
		return
	}
	ctx := r.Context()
	b := u.ctl.Buckets()
	now := time.Now()
	var workers []workerRow
	var problems []string
	eachKV(ctx, b.Workers, &problems, func(raw []byte) {
		var wi worker.Info
		if json.Unmarshal(raw, &wi) == nil {
			workers = append(workers, workerRow{Info: wi, Age: ago(wi.Seen, now), Stale: now.Sub(wi.Seen) > 20*time.Second})
		}
	})
	var agents []agentRow
	eachKV(ctx, b.Agents, &problems, func(raw []byte) {
		var ar agent.Registration
		if json.Unmarshal(raw, &ar) == nil && ar.Agent != "" {
			agents = append(agents, agentRow{Registration: ar, Age: ago(ar.Seen, now), Stale: !ar.Expires.IsZero() && now.After(ar.Expires)})
		}
	})
	slices.SortFunc(workers, func(a, b workerRow) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(agents, func(a, b agentRow) int {
		return cmp.Or(cmp.Compare(a.Agent, b.Agent), cmp.Compare(a.Replica, b.Replica))
	})
	u.render(w, r, http.StatusOK, "workers", map[string]any{"Title": "Workers and agents", "Nav": "workers", "Workers": workers, "Agents": agents, "Problems": problems})
}

// eachKV calls fn with every value of a bucket; read errors are collected for the page.
func eachKV(ctx context.Context, kv jetstream.KeyValue, problems *[]string, fn func([]byte)) {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		*problems = append(*problems, fmt.Sprintf("list %s: %v", kv.Bucket(), err))
		return
	}
	for k := range lister.Keys() {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired between list and read
		}
		if err != nil {
			*problems = append(*problems, fmt.Sprintf("read %s/%s: %v", kv.Bucket(), k, err))
			continue
		}
		fn(e.Value())
	}
}

// maxEvents is how many webhook events the events page lists.
const maxEvents = 200

// eventsPage lists the newest webhook events from the audit log: what each was about, the
// runs it started and the triggers whose expression failed on it (they started no run).
func (u *UI) eventsPage(w http.ResponseWriter, r *http.Request) {
	if !u.authorize(w, r, "", rbac.Audit, rbac.Get, "*") { // read from the audit log
		return
	}
	var problems []string
	events, err := u.ctl.WebhookEvents(r.Context(), maxEvents)
	if err != nil {
		problems = append(problems, err.Error())
	}
	u.render(w, r, http.StatusOK, "events", map[string]any{"Title": "Webhook events", "Nav": "events", "Events": events, "Problems": problems})
}
