package ui

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
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

// allRuns reads every run, newest first (by creation time: webhook runs have delivery ids,
// which do not sort by time).
func (u *UI) allRuns(ctx context.Context) ([]*pipelines.Run, error) {
	runs, err := u.ctl.List(ctx, 0)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	slices.SortStableFunc(runs, func(a, b *pipelines.Run) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return runs, nil
}

type runRow struct {
	*pipelines.Run
	Status   pipelines.Status // shown: waitingApproval while an approval is pending
	Duration string
	Trigger  triggerView
}

func (u *UI) runsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	pipeline, status := q.Get("pipeline"), q.Get("status")
	if status != "" && !slices.Contains(statusFilters, status) {
		u.fail(w, r, http.StatusBadRequest, fmt.Sprintf("status filter %q: want one of %s", status, strings.Join(statusFilters, ", ")))
		return
	}
	page, _ := strconv.Atoi(q.Get("page"))
	page = max(page, 1)
	runs, err := u.allRuns(r.Context())
	if err != nil {
		u.fail(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	var names []string
	var match []*pipelines.Run
	user := userOf(r.Context())
	for _, run := range runs {
		if !u.ctl.CanGetRun(r.Context(), user, run) {
			continue // rbac.go: only the runs the user may get
		}
		if !slices.Contains(names, run.Pipeline) {
			names = append(names, run.Pipeline)
		}
		if pipeline != "" && run.Pipeline != pipeline {
			continue
		}
		if status != "" && !statusMatches(run, status) {
			continue
		}
		match = append(match, run)
	}
	slices.Sort(names)
	// Runs waiting for an approval first: they are what someone has to act on.
	slices.SortStableFunc(match, func(a, b *pipelines.Run) int {
		return cmpBool(b.WaitingApproval(), a.WaitingApproval())
	})
	from := min((page-1)*PageSize, len(match))
	to := min(from+PageSize, len(match))
	rows := make([]runRow, 0, to-from)
	now := time.Now()
	for _, run := range match[from:to] {
		rows = append(rows, runRow{Run: run, Status: run.Shown(), Duration: duration(run.Started, run.Ended, now), Trigger: trigger(run.Trigger)})
	}
	link := func(p int) string {
		v := q
		v.Set("page", strconv.Itoa(p))
		return "/ui/?" + v.Encode()
	}
	data := map[string]any{"Title": "Runs", "Nav": "runs", "Rows": rows, "Pipelines": names, "Pipeline": pipeline, "Status": status,
		"Statuses": statusFilters, "Total": len(match), "Page": page, "From": from + 1, "To": to}
	if page > 1 {
		data["Prev"] = link(page - 1)
	}
	if to < len(match) {
		data["Next"] = link(page + 1)
	}
	u.render(w, r, http.StatusOK, "runs", data)
}

// statusFilters are the runs page's status choices; "active" is every run not finished,
// "waiting" every run with a parked step (an approval, a PR merge, a sync), "waitingApproval"
// those waiting for an approval. A run's stored status is never "waiting" (only steps park).
var statusFilters = []string{"active", "waitingApproval", "waiting", "succeeded", "failed", "cancelled", "rolledBack"}

func statusMatches(r *pipelines.Run, f string) bool {
	switch f {
	case "active":
		return !r.Status.Terminal()
	case "waiting":
		return r.Parked()
	case "waitingApproval":
		return r.WaitingApproval()
	}
	return string(r.Status) == f
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func (u *UI) runPage(w http.ResponseWriter, r *http.Request) {
	run, err := u.ctl.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, controller.ErrNotFound) {
			code = http.StatusNotFound
		}
		u.fail(w, r, code, err.Error())
		return
	}
	if !u.mayGetRun(w, r, run, false) {
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
