package controller

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
)

const idemPipeline = "name: idem\ninputs:\n  note: {type: string, default: none}\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop, with: {message: once}}\n"

var idemAuth = &Auth{Anonymous: &User{Name: "tester"}}

// startBody is a POST /api/v1/runs body for src with inputs.
func startBody(src string, inputs map[string]any) string {
	b, _ := json.Marshal(map[string]any{"file": "idem.yaml", "source": src, "inputs": inputs})
	return string(b)
}

type startAnswer struct {
	code     int
	replayed string
	run      pipelines.Run
	body     string
}

// postStart sends one POST /api/v1/runs with key (none when empty).
func postStart(t *testing.T, client *http.Client, base, key, body string) (startAnswer, error) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/api/v1/runs", strings.NewReader(body))
	if key != "" {
		req.Header.Set(IdempotencyHeader, key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return startAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return startAnswer{}, err
	}
	a := startAnswer{code: resp.StatusCode, replayed: resp.Header.Get(ReplayedHeader), body: string(b)}
	if resp.StatusCode < 300 {
		if err := json.Unmarshal(b, &a.run); err != nil {
			t.Fatalf("start answer %d: %v: %s", resp.StatusCode, err, b)
		}
	}
	return a, nil
}

// runsOf lists the ids of the runs of pipeline idem.
func runsOf(t *testing.T, c *Controller) []string {
	t.Helper()
	list, err := c.List(context.Background(), 0)
	if err != nil && !strings.Contains(err.Error(), "no keys found") {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range list {
		if r.Pipeline == "idem" {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// Twenty requests at once with one Idempotency-Key, split between two controller replicas,
// start one run: every answer names it, one says it started it and the others that they
// replay it.
func TestIdempotentStartConcurrent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	second := e.replica()
	srv := e.serve(idemAuth)
	srv2 := httptest.NewServer(second.Handler(idemAuth))
	defer srv2.Close()
	const n = 20
	answers := make([]startAnswer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			base := srv.URL
			if i%2 == 1 {
				base = srv2.URL
			}
			a, err := postStart(t, http.DefaultClient, base, "deploy-42", startBody(idemPipeline, map[string]any{}))
			if err != nil {
				t.Error(err)
			}
			answers[i] = a
		}()
	}
	close(start)
	wg.Wait()
	first := 0
	for i, a := range answers {
		if a.code != http.StatusCreated || a.run.ID == "" || a.run.ID != answers[0].run.ID {
			t.Fatalf("answer %d: %d %s (first answer: run %s)", i, a.code, a.body, answers[0].run.ID)
		}
		if a.replayed == "" {
			first++
		} else if a.replayed != "true" {
			t.Errorf("answer %d: %s %q", i, ReplayedHeader, a.replayed)
		}
	}
	if first != 1 {
		t.Errorf("%d answers say they started the run; want 1", first)
	}
	if ids := runsOf(t, e.ctl); len(ids) != 1 {
		t.Fatalf("%d runs started: %v", len(ids), ids)
	}
	e.wait(answers[0].run.ID, 30*time.Second)
	// Done and replayed again: still the one run, now as it is.
	a, err := postStart(t, srv.Client(), srv.URL, "deploy-42", startBody(idemPipeline, map[string]any{}))
	if err != nil || a.code != http.StatusCreated || a.replayed != "true" || a.run.ID != answers[0].run.ID || a.run.Status != pipelines.StSucceeded {
		t.Fatalf("replay after the end: %v %d %q %s", err, a.code, a.replayed, a.body)
	}
}

// The same key with another request is refused with 422 and starts nothing; another user's
// same key is another key; bad keys are refused with 400 naming the header.
func TestIdempotencyKeyMisuse(t *testing.T) {
	e := newEnv(t, envOpts{workers: 1})
	srv := e.serve(apiAuth(t))
	post := func(token, key, body string, extra ...string) startAnswer {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/api/v1/runs", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if key != "" {
			req.Header.Set(IdempotencyHeader, key)
		}
		for _, k := range extra {
			req.Header.Add(IdempotencyHeader, k)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		a := startAnswer{code: resp.StatusCode, replayed: resp.Header.Get(ReplayedHeader), body: string(b)}
		_ = json.Unmarshal(b, &a.run)
		return a
	}
	const alice, bob = "alice-token-123456", "bob-token-abcdefg"
	first := post(alice, "k1", startBody(idemPipeline, map[string]any{}))
	if first.code != 201 || first.replayed != "" {
		t.Fatalf("first: %d %q %s", first.code, first.replayed, first.body)
	}
	for name, body := range map[string]string{
		"other inputs":   startBody(idemPipeline, map[string]any{"note": "x"}),
		"other pipeline": startBody(strings.Replace(idemPipeline, "once", "twice", 1), map[string]any{}),
		"other run id":   `{"file":"idem.yaml","source":` + fmt.Sprintf("%q", idemPipeline) + `,"id":"chosen1"}`,
	} {
		a := post(alice, "k1", body)
		if a.code != 422 || !strings.Contains(a.body, "Idempotency-Key reused") || !strings.Contains(a.body, first.run.ID) || a.replayed != "" {
			t.Errorf("%s with the same key: %d %q %s", name, a.code, a.replayed, a.body)
		}
	}
	// The source as base64 is the same request.
	b64body := `{"file":"idem.yaml","source":"` + b64(idemPipeline) + `","inputs":{}}`
	if a := post(alice, "k1", b64body); a.code != 201 || a.replayed != "true" || a.run.ID != first.run.ID {
		t.Errorf("same request, source as base64: %d %q %s", a.code, a.replayed, a.body)
	}
	other := post(bob, "k1", startBody(idemPipeline, map[string]any{}))
	if other.code != 201 || other.replayed != "" || other.run.ID == first.run.ID {
		t.Errorf("bob's key k1 is not alice's: %d %q run %s (alice's %s)", other.code, other.replayed, other.run.ID, first.run.ID)
	}
	for key, want := range map[string]string{
		strings.Repeat("k", MaxIdempotencyKey+1): "at most 255",
		"has space":                              `' ' at position 4`,
		"slash/inside":                           `'/' at position 6`,
		"semi;colon":                             `';' at position 5`,
		"ünï":                                    "position 1",
	} {
		if a := post(alice, key, startBody(idemPipeline, map[string]any{})); a.code != 400 || !strings.Contains(a.body, "Idempotency-Key header") || !strings.Contains(a.body, want) {
			t.Errorf("key %q: %d %s", key, a.code, a.body)
		}
	}
	if a := post(alice, "", startBody(idemPipeline, map[string]any{}), "a1", "a2"); a.code != 400 || !strings.Contains(a.body, "2 Idempotency-Key headers") {
		t.Errorf("two keys: %d %s", a.code, a.body)
	}
	req, _ := http.NewRequest("POST", srv.URL+"/api/v1/runs", strings.NewReader(startBody(idemPipeline, map[string]any{})))
	req.Header.Set("Authorization", "Bearer "+alice)
	req.Header[IdempotencyHeader] = []string{""}
	if resp, err := srv.Client().Do(req); err != nil || resp.StatusCode != 400 {
		t.Errorf("empty key: %v %v", err, resp)
	}
	if ids := runsOf(t, e.ctl); len(ids) != 2 {
		t.Errorf("runs: %v; want alice's and bob's", ids)
	}
	// An invalid pipeline under a key: refused, and refused the same way again.
	bad := startBody("name: idem\nstages:\n  - id: s\n    steps: [{id: a, type: Nope}]\n", map[string]any{})
	for range 2 {
		if a := post(alice, "k-bad", bad); a.code != 422 || !strings.Contains(a.body, "pipeline is invalid") {
			t.Errorf("invalid pipeline under a key: %d %s", a.code, a.body)
		}
	}
}

// dropFirstStart serves next, but for the first POST /api/v1/runs it lets the handler finish
// (the run is created) and then closes the connection without an answer, as a server that
// died at that moment or a proxy that cut it would.
func dropFirstStart(next http.Handler) (http.Handler, *atomic.Int32) {
	var dropped atomic.Int32
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/api/v1/runs" || !dropped.CompareAndSwap(0, 1) {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(httptest.NewRecorder(), r)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		_ = conn.Close()
	}), &dropped
}

// A start whose answer was lost: the retry with the same key gets the run the first request
// created, and no second one is started.
func TestIdempotentStartAfterLostAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	h, dropped := dropFirstStart(e.ctl.Handler(idemAuth))
	srv := httptest.NewServer(h)
	defer srv.Close()
	body := startBody(idemPipeline, map[string]any{})
	if _, err := postStart(t, srv.Client(), srv.URL, "lost-1", body); err == nil {
		t.Fatal("the first answer was not dropped")
	}
	if dropped.Load() != 1 {
		t.Fatal("the first start never reached the server")
	}
	created := runsOf(t, e.ctl)
	if len(created) != 1 {
		t.Fatalf("runs after the lost answer: %v", created)
	}
	a, err := postStart(t, srv.Client(), srv.URL, "lost-1", body)
	if err != nil || a.code != 201 || a.replayed != "true" || a.run.ID != created[0] {
		t.Fatalf("retry: %v %d %q %s; want run %s replayed", err, a.code, a.replayed, a.body, created[0])
	}
	if ids := runsOf(t, e.ctl); len(ids) != 1 {
		t.Fatalf("runs after the retry: %v", ids)
	}
}

// A server that died after claiming the key and before creating the run: the retry creates
// the run the claim names, once.
func TestIdempotentStartAfterClaimOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	srv := e.serve(idemAuth)
	body := startBody(idemPipeline, map[string]any{})
	req := StartRequest{File: "idem.yaml", Source: SourceText(idemPipeline), Inputs: map[string]any{}}
	claim, err := e.ctl.claimRun(context.Background(), idemKey("tester", "half-done"), requestDigest(req), "")
	if err != nil {
		t.Fatal(err)
	}
	if ids := runsOf(t, e.ctl); len(ids) != 0 {
		t.Fatalf("a claim started runs: %v", ids)
	}
	a, err := postStart(t, srv.Client(), srv.URL, "half-done", body)
	if err != nil || a.code != 201 || a.run.ID != claim.Run {
		t.Fatalf("retry after a claim only: %v %d %s; want run %s", err, a.code, a.body, claim.Run)
	}
	a, err = postStart(t, srv.Client(), srv.URL, "half-done", body)
	if err != nil || a.code != 201 || a.replayed != "true" || a.run.ID != claim.Run {
		t.Fatalf("second retry: %v %d %q %s", err, a.code, a.replayed, a.body)
	}
	if ids := runsOf(t, e.ctl); len(ids) != 1 {
		t.Fatalf("runs: %v", ids)
	}
}

// A key is kept for queue.IdempotencyKeyAge (the bucket's TTL; shortened here): after it the
// same key starts a new run.
func TestIdempotencyKeyExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	ctx := context.Background()
	kv, err := queue.OpenIdempotencyKeys(ctx, e.conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil || st.TTL() != queue.WebhookDedupWindow {
		t.Fatalf("bucket TTL %v (%v); want the webhook dedup window %v", st.TTL(), err, queue.WebhookDedupWindow)
	}
	if _, err := e.conn.JS.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: queue.BucketIdempotency, History: 1,
		TTL: 2 * time.Second, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if kv, err = queue.OpenIdempotencyKeys(ctx, e.conn.JS); err != nil {
		t.Fatal(err)
	}
	srv := e.serve(idemAuth)
	body := startBody(idemPipeline, map[string]any{})
	a, err := postStart(t, srv.Client(), srv.URL, "short-lived", body)
	if err != nil || a.code != 201 {
		t.Fatalf("start: %v %d %s", err, a.code, a.body)
	}
	first := a.run.ID
	if a, err := postStart(t, srv.Client(), srv.URL, "short-lived", body); err != nil || a.replayed != "true" || a.run.ID != first {
		t.Fatalf("replay within the TTL: %v %q %s", err, a.replayed, a.body)
	}
	eventually(t, 60*time.Second, func() bool {
		_, err := kv.Get(ctx, idemKey("tester", "short-lived"))
		return err != nil
	}, func() string { return "the key never expired" })
	a, err = postStart(t, srv.Client(), srv.URL, "short-lived", body)
	if err != nil || a.code != 201 || a.replayed != "" || a.run.ID == first {
		t.Fatalf("after expiry: %v %d %q run %s (first %s)", err, a.code, a.replayed, a.run.ID, first)
	}
	if ids := runsOf(t, e.ctl); len(ids) != 2 {
		t.Fatalf("runs: %v", ids)
	}
}

// runChildAPI is a `prflow server` that dies on its first run start: it creates the run, says
// so on stdout and hangs without answering until the test kills it (SIGKILL).
func runChildAPI(url string) {
	ctx := context.Background()
	conn, err := queue.Open(ctx, queue.Options{URL: url})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	ctl, err := New(ctx, conn, WithRegistry(testRegistry()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	go func() { _ = ctl.Run(ctx) }()
	<-ctl.Ready()
	h := ctl.Handler(idemAuth)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	fmt.Printf("listening http://%s\n", ln.Addr())
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" && r.URL.Path == "/api/v1/runs" {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			fmt.Printf("created %d %s\n", rec.Code, rec.Header().Get(ReplayedHeader))
			select {} // killed before it answers
		}
		h.ServeHTTP(w, r)
	}))
}

// A server process killed (SIGKILL) after creating a run and before answering: the client's
// retry with the same key, to another server, gets that run; one run exists.
func TestIdempotentStartServerKilled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1, listen: "127.0.0.1:0"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PRFLOW_TEST_API_URL="+e.conn.ClientURL())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(60 * time.Second):
			t.Fatal("the server process said nothing for 60s")
			return ""
		}
	}
	addr, ok := strings.CutPrefix(next(), "listening ")
	if !ok {
		t.Fatal("server process did not start")
	}
	body := startBody(idemPipeline, map[string]any{})
	errc := make(chan error, 1)
	go func() {
		_, err := postStart(t, http.DefaultClient, addr, "killed-1", body)
		errc <- err
	}()
	if l := next(); l != "created 201 " {
		t.Fatalf("server process: %q", l)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Fatal("the client got an answer from a killed server")
	}
	// This process's controller learns of the run from its watch: wait for it to show.
	created := runsOf(t, e.ctl)
	for deadline := time.Now().Add(30 * time.Second); len(created) == 0 && time.Now().Before(deadline); created = runsOf(t, e.ctl) {
		time.Sleep(20 * time.Millisecond)
	}
	if len(created) != 1 {
		t.Fatalf("runs the killed server created: %v", created)
	}
	srv := e.serve(idemAuth)
	a, err := postStart(t, srv.Client(), srv.URL, "killed-1", body)
	if err != nil || a.code != 201 || a.replayed != "true" || a.run.ID != created[0] {
		t.Fatalf("retry: %v %d %q %s; want run %s", err, a.code, a.replayed, a.body, created[0])
	}
	if r := e.wait(created[0], 60*time.Second); r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
	if ids := runsOf(t, e.ctl); len(ids) != 1 {
		t.Fatalf("runs: %v", ids)
	}
}

// The OpenAPI document describes the key as the server checks it, and the replay header.
func TestOpenAPIDocumentsIdempotencyKey(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name, In string
				Schema   struct {
					MaxLength int    `json:"maxLength"`
					Pattern   string `json:"pattern"`
				}
			}
			Responses map[string]struct {
				Headers map[string]json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	op := doc.Paths["/api/v1/runs"]["post"]
	if len(op.Parameters) != 1 || op.Parameters[0].Name != IdempotencyHeader || op.Parameters[0].In != "header" ||
		op.Parameters[0].Schema.MaxLength != MaxIdempotencyKey {
		t.Fatalf("POST /api/v1/runs parameters: %+v", op.Parameters)
	}
	re := regexp.MustCompile(op.Parameters[0].Schema.Pattern)
	for _, k := range []string{"a", "0f8c-UUID_like.key:1", strings.Repeat("x", MaxIdempotencyKey)} {
		if !re.MatchString(k) || CheckIdempotencyKey(k) != nil {
			t.Errorf("key %q: pattern %v, check %v", k, re.MatchString(k), CheckIdempotencyKey(k))
		}
	}
	for _, k := range []string{"", "a b", "a/b", "ü", "a;"} {
		if re.MatchString(k) || CheckIdempotencyKey(k) == nil {
			t.Errorf("key %q: pattern %v, check %v", k, re.MatchString(k), CheckIdempotencyKey(k))
		}
	}
	if _, ok := op.Responses["201"].Headers[ReplayedHeader]; !ok {
		t.Errorf("201 does not document %s", ReplayedHeader)
	}
}
