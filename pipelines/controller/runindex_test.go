package controller

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
)

const listSrc = "name: %s\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n"

// listPage GETs a runs list page: the runs, the next cursor (header), the status and body.
func listPage(t *testing.T, base, query string) ([]RunSummary, string, int, string) {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/runs" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatalf("GET %s: %s: %v", query, resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e apiError
		_ = json.Unmarshal(raw, &e)
		return nil, "", resp.StatusCode, e.Error
	}
	var runs []RunSummary
	if err := json.Unmarshal(raw, &runs); err != nil {
		t.Fatalf("GET %s: %v: %s", query, err, raw)
	}
	next := resp.Header.Get(NextCursorHeader)
	if next != "" && !strings.Contains(resp.Header.Get("Link"), url.QueryEscape(next)) {
		t.Errorf("GET %s: Link %q does not carry the cursor %q", query, resp.Header.Get("Link"), next)
	}
	return runs, next, resp.StatusCode, string(raw)
}

// TestRunsListPagesUnderConcurrentStarts: a reader pages through GET /api/v1/runs with a
// small limit while other runs start: every run that existed when paging began shows exactly
// once, pages run newest first, and no run shows twice. Before the index the list had no
// cursor (the first page was all a client could get).
func TestRunsListPagesUnderConcurrentStarts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{}) // no workers: runs stay running, the list does not change under us by status
	srv := e.serve(&Auth{Anonymous: &User{Name: "alice"}})
	existing := map[string]bool{}
	for i := range 40 {
		existing[e.startRun(fmt.Sprintf(listSrc, fmt.Sprintf("p%d", i%3)), nil).ID] = true
	}
	var mu sync.Mutex
	var started []string
	stop := repeatUntilStopped(1, func() bool {
		r, err := e.ctl.Start(t.Context(), StartRequest{File: "late.yaml", Source: []byte(fmt.Sprintf(listSrc, "late")), Executor: "tester"})
		if err != nil {
			t.Errorf("start while paging: %v", err)
			return false
		}
		mu.Lock()
		started = append(started, r.ID)
		mu.Unlock()
		return true
	})
	seen := map[string]int{}
	var last *RunSummary
	cursor, pages := "", 0
	for {
		q := "?limit=7"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		runs, next, code, body := listPage(t, srv.URL, q)
		if code != 200 {
			t.Fatalf("page %d: %d %s", pages, code, body)
		}
		pages++
		if len(runs) > 7 {
			t.Fatalf("page %d holds %d runs, limit 7", pages, len(runs))
		}
		for i := range runs {
			s := &runs[i]
			seen[s.ID]++
			if last != nil && before(s, last) > 0 {
				t.Errorf("page %d: %s (%s) listed after the newer %s (%s)", pages, s.ID, s.Created, last.ID, last.Created)
			}
			last = s
		}
		time.Sleep(20 * time.Millisecond) // let starts land between pages
		if next == "" {
			break
		}
		cursor = next
	}
	stop()
	for id, n := range seen {
		if n > 1 {
			t.Errorf("run %s listed %d times", id, n)
		}
	}
	for id := range existing {
		if seen[id] != 1 {
			t.Errorf("run %s, there before paging began, listed %d times", id, seen[id])
		}
	}
	if pages < 40/7 {
		t.Errorf("%d pages for 40 runs and more, limit 7", pages)
	}
	mu.Lock()
	t.Logf("%d pages; %d runs started while paging", pages, len(started))
	mu.Unlock()
}

// TestRunsListRefusesBadInput: a garbled, forged or hostile cursor, a limit that is no whole
// number or is negative, an unknown status or parameter: 400 naming what is wrong, never a
// page from somewhere else or a 500.
func TestRunsListRefusesBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	srv := e.serve(&Auth{Anonymous: &User{Name: "alice"}})
	e.startRun(fmt.Sprintf(listSrc, "one"), nil)
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for q, want := range map[string]string{
		"?cursor=garbage":                        `bad cursor "garbage": not a cursor from a runs list`,
		"?cursor=r1.%21%21%21":                   `bad cursor "r1.!!!": not base64url`,
		"?cursor=r1." + b64("nodot"):             "damaged",
		"?cursor=r1." + b64("zz.../../etc"):      "damaged",
		"?cursor=r1." + b64("1.run id; drop"):    "damaged",
		"?cursor=r1." + b64("99999999999999.r1"): "damaged", // beyond int64
		"?cursor=" + strings.Repeat("A", 5000):   "bad cursor",
		"?limit=ten":                             `limit "ten": want a whole number from 1 to 500 (0 or none: 50)`,
		"?limit=-1":                              `limit "-1": want a whole number`,
		"?limit=99999999999999999999999":         `want a whole number`,
		"?status=waitingapproval":                `status filter "waitingapproval": want one of active, waitingApproval`,
		"?curser=x":                              `unknown query parameter "curser" (did you mean "cursor"?)`,
	} {
		_, _, code, body := listPage(t, srv.URL, q)
		if code != http.StatusBadRequest || !strings.Contains(body, want) {
			t.Errorf("GET %.60s: %d %s, want 400 with %q", q, code, body, want)
		}
	}
}

// TestRunsListLimitsAndFilters: no limit or 0 gives DefaultRunsLimit, a huge one is cut to
// MaxRunsLimit (and the next cursor carries on), and the pipeline and status filters work
// across pages.
func TestRunsListLimitsAndFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	srv := e.serve(&Auth{Anonymous: &User{Name: "alice"}})
	var done []string
	for i := range 55 { // parked on a Wait: neither succeeded nor in a worker's way
		e.startRun(fmt.Sprintf("name: bulk%d\nstages:\n  - id: s\n    steps:\n      - {id: w, type: Wait, with: {duration: 10m}}\n", i%2), nil)
	}
	for range 3 {
		r := e.startRun(fmt.Sprintf(listSrc, "quick"), nil)
		e.wait(r.ID, 30*time.Second)
		done = append(done, r.ID)
	}
	for _, q := range []string{"", "?limit=0"} {
		runs, next, code, body := listPage(t, srv.URL, q)
		if code != 200 || len(runs) != DefaultRunsLimit || next == "" {
			t.Errorf("GET %q: %d, %d runs, next %q, want %d and a cursor: %.300s", q, code, len(runs), next, DefaultRunsLimit, body)
		}
	}
	runs, next, _, _ := listPage(t, srv.URL, "?limit=100000")
	if len(runs) != 58 || next != "" {
		t.Errorf("limit=100000: %d runs, next %q, want all 58 and no cursor", len(runs), next)
	}
	// Filters keep working, and with pages: the three quick runs one at a time.
	var got []string
	cursor := ""
	for range 5 {
		q := "?pipeline=quick&limit=1"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		runs, next, code, body := listPage(t, srv.URL, q)
		if code != 200 {
			t.Fatalf("%s: %d %s", q, code, body)
		}
		for _, r := range runs {
			got = append(got, r.ID)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	if strings.Join(got, " ") != strings.Join([]string{done[2], done[1], done[0]}, " ") {
		t.Errorf("pipeline=quick, one per page: %v, want %v newest first", got, done)
	}
	eventually(t, 30*time.Second, func() bool {
		runs, _, _, _ := listPage(t, srv.URL, "?status=waiting&pipeline=bulk1&limit=500")
		return len(runs) == 27 && runs[0].Parked && !runs[0].Terminal()
	}, func() string { return "status=waiting&pipeline=bulk1 does not list the 27 parked bulk1 runs" })
	eventually(t, 20*time.Second, func() bool {
		runs, _, _, _ := listPage(t, srv.URL, "?status=succeeded&limit=500")
		return len(runs) == 3 && runs[0].Status == pipelines.StSucceeded && runs[0].StagesTotal == 1 && runs[0].StagesDone == 1
	}, func() string { return "status=succeeded does not list exactly the three quick runs" })
}

// TestListRunsCapsLimit: a page never holds more than MaxRunsLimit runs, whatever is asked.
func TestListRunsCapsLimit(t *testing.T) {
	c := &Controller{loaded: make(chan struct{})}
	close(c.loaded)
	t0 := time.Now()
	for i := range MaxRunsLimit + 20 {
		c.runs.put(&pipelines.Run{ID: fmt.Sprintf("r%04d", i), Pipeline: "p", Status: pipelines.StSucceeded, Created: t0.Add(time.Duration(i) * time.Second)}, 1, nil)
	}
	page, err := c.ListRuns(t.Context(), ListOptions{Limit: 1 << 30})
	if err != nil || len(page.Runs) != MaxRunsLimit || page.Limit != MaxRunsLimit || page.Next == "" {
		t.Fatalf("limit 2^30: %v, %d runs, limit %d, next %q", err, len(page.Runs), page.Limit, page.Next)
	}
	rest, err := c.ListRuns(t.Context(), ListOptions{Limit: 1 << 30, Cursor: page.Next})
	if err != nil || len(rest.Runs) != 20 || rest.Next != "" || rest.Runs[0].ID != "r0019" || rest.Runs[19].ID != "r0000" {
		t.Fatalf("second page: %v, %d runs, next %q", err, len(rest.Runs), rest.Next)
	}
}

// TestRunIndexOrder: runs indexed out of order (another replica's, a restart's replay) list
// newest first by creation; a newer revision replaces a run in place, an older one is dropped,
// a deleted run leaves.
func TestRunIndexOrder(t *testing.T) {
	var x runIndex
	t0 := time.Now()
	at := func(id string, sec int, st pipelines.Status) *pipelines.Run {
		return &pipelines.Run{ID: id, Pipeline: "p", Status: st, Created: t0.Add(time.Duration(sec) * time.Second)}
	}
	x.put(at("b", 2, pipelines.StRunning), 5, nil)
	x.put(at("d", 4, pipelines.StRunning), 5, nil)
	x.put(at("a", 1, pipelines.StRunning), 5, nil)
	x.put(at("c", 3, pipelines.StRunning), 5, nil)
	x.put(at("c", 3, pipelines.StSucceeded), 9, nil)
	x.put(at("c", 3, pipelines.StFailed), 7, nil) // late, older revision
	x.remove("a")
	x.remove("zz")
	var got []string
	x.walk(nil, func(s *RunSummary) bool { got = append(got, s.ID+"="+string(s.Status)); return true })
	if strings.Join(got, " ") != "d=running c=succeeded b=running" || x.len() != 3 {
		t.Fatalf("index: %v", got)
	}
}
