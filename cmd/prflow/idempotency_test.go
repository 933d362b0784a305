package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
)

// idemServer starts a server on addr whose one token (user cli) is PRFLOW_TEST_TOKEN; it
// returns what stops it.
func idemServer(t *testing.T, addr string) (stop func()) {
	t.Helper()
	dir := t.TempDir()
	tokens := writeFile(t, dir, "tokens.yaml", "tokens:\n  - user: cli\n    token: env:PRFLOW_TEST_TOKEN\n")
	return startServerAt(t, addr, "--tokens", tokens, "--data-dir", filepath.Join(dir, "nats"))
}

// runsOfPipeline lists the server's runs of pipeline name.
func runsOfPipeline(t *testing.T, addr, name string) []string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/api/v1/runs", nil)
	req.Header.Set("Authorization", "Bearer cli-token-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list []pipelines.Run
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range list {
		if r.Pipeline == name {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// `prflow run` whose first start request reached the server but whose answer was lost (the
// connection closed: EOF) retries by itself with the same idempotency key and prints the run
// the first request started; the server holds one run, not two.
func TestRunRetriesLostStartWithItsKey(t *testing.T) {
	t.Setenv("PRFLOW_TEST_TOKEN", "cli-token-0123456789")
	addr := freeAddr(t)
	t.Cleanup(idemServer(t, addr))
	target, _ := url.Parse("http://" + addr)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var starts, dropped atomic.Int32
	var keysMu sync.Mutex
	var keys []string
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/api/v1/runs" {
			proxy.ServeHTTP(w, r)
			return
		}
		starts.Add(1)
		keysMu.Lock()
		keys = append(keys, r.Header.Get(controller.IdempotencyHeader))
		keysMu.Unlock()
		if !dropped.CompareAndSwap(0, 1) {
			proxy.ServeHTTP(w, r)
			return
		}
		// The server gets the request and starts the run; its answer never comes back.
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, r)
		if rec.Code != http.StatusCreated {
			t.Errorf("first start: %d %s", rec.Code, rec.Body)
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		_ = conn.Close()
	}))
	defer front.Close()
	p := filepath.Join(t.TempDir(), "p.yaml")
	_ = os.WriteFile(p, []byte("name: lost\nstages: [{id: s, steps: [{id: a, type: Noop}]}]\n"), 0o644)
	out, err := run(t, "run", p, "--server", front.URL, "--token", "env:PRFLOW_TEST_TOKEN")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	ids := runsOfPipeline(t, addr, "lost")
	if len(ids) != 1 {
		t.Fatalf("runs on the server: %v\n%s", ids, out)
	}
	if !strings.Contains(out, "run "+ids[0]+" already started by an earlier request with idempotency key ") ||
		!strings.Contains(out, "retrying with the same idempotency key") {
		t.Errorf("output does not say it retried and got the earlier run %s:\n%s", ids[0], out)
	}
	if starts.Load() != 2 || len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Errorf("start requests %d with keys %q; want two with one key", starts.Load(), keys)
	}

	// A second invocation is a new key and a new run; a given key gets its run again.
	out, err = run(t, "run", p, "--server", front.URL, "--token", "env:PRFLOW_TEST_TOKEN", "--idempotency-key", "nightly-7")
	if err != nil || !strings.HasSuffix(strings.TrimSpace(out), "started") {
		t.Fatalf("run with a key: %v %s", err, out)
	}
	id := strings.Fields(out)[1]
	out, err = run(t, "run", p, "--server", front.URL, "--token", "env:PRFLOW_TEST_TOKEN", "--idempotency-key", "nightly-7")
	if err != nil || !strings.Contains(out, "run "+id+" already started by an earlier request with idempotency key nightly-7") {
		t.Fatalf("the same key again: %v %s", err, out)
	}
	if ids := runsOfPipeline(t, addr, "lost"); len(ids) != 2 {
		t.Fatalf("runs: %v", ids)
	}
	if _, err := run(t, "run", p, "--server", front.URL, "--token", "x", "--idempotency-key", "no spaces"); err == nil ||
		!strings.Contains(err.Error(), "--idempotency-key: Idempotency-Key header has ' ' at position 3") {
		t.Fatalf("bad key: %v", err)
	}
}

// `prflow run` against a server that is not up yet (connection refused) keeps trying and
// starts the run once the server is there.
func TestRunWaitsForTheServer(t *testing.T) {
	t.Setenv("PRFLOW_TEST_TOKEN", "cli-token-0123456789")
	addr := freeAddr(t)
	p := filepath.Join(t.TempDir(), "p.yaml")
	_ = os.WriteFile(p, []byte("name: later\nstages: [{id: s, steps: [{id: a, type: Noop}]}]\n"), 0o644)
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := run(t, "run", p, "--server", "http://"+addr, "--token", "env:PRFLOW_TEST_TOKEN")
		done <- result{out, err}
	}()
	time.Sleep(time.Second) // a refused attempt or two first
	t.Cleanup(idemServer(t, addr))
	var res result
	select {
	case res = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("prflow run never returned")
	}
	if res.err != nil || !strings.Contains(res.out, "connection refused") || !strings.HasSuffix(strings.TrimSpace(res.out), "started") {
		t.Fatalf("run: %v\n%s", res.err, res.out)
	}
	if ids := runsOfPipeline(t, addr, "later"); len(ids) != 1 || !strings.Contains(res.out, "run "+ids[0]+" started") {
		t.Fatalf("runs %v\n%s", ids, res.out)
	}
}
