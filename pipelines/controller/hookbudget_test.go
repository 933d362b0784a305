package controller_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/scm/scmtest"
)

// TestWebhookReadBudget: while two slow deliveries hold the server's read budget, further
// ones are answered 503 with Retry-After without their body being read, and nothing is
// queued for them; once the two end (one completes, one's client goes away mid-body) the
// budget is back to zero and deliveries are accepted again.
func TestWebhookReadBudget(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, nil, nil, nil, 0)
	ctx := context.Background()
	url := e.srv.URL + "/hooks/github"
	push := bigPush(40, strings.Repeat("2", 40))
	proto, err := scmtest.GitHubWebhookRequest(ctx, url, hookSecret, push)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(proto.Body)
	size := int64(len(body))
	cfg := controller.NewWebhooks(0, map[string]string{"github": hookSecret})
	cfg.SetReadBudget(2 * size)
	e.Ctl.SetWebhooks(cfg)
	budget := cfg.ReadBudget()

	request := func(b io.Reader) *http.Request {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, b)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = proto.Header.Clone()
		req.ContentLength = size
		return req
	}
	// Two slow senders: half the body, then they wait.
	type slow struct {
		w    *io.PipeWriter
		code chan int
	}
	var slows []slow
	for range 2 {
		pr, pw := io.Pipe()
		s := slow{w: pw, code: make(chan int, 1)}
		slows = append(slows, s)
		t.Cleanup(func() { _ = pw.CloseWithError(errors.New("test over")) }) // before the server's Close waits for it
		go func() {
			resp, err := http.DefaultClient.Do(request(pr))
			if err != nil {
				s.code <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s.code <- resp.StatusCode
		}()
		go func() { _, _ = pw.Write(body[:size/2]) }()
	}
	deadline := time.Now().Add(60 * time.Second)
	for budget.InUse() != 2*size {
		if time.Now().After(deadline) {
			t.Fatalf("the slow deliveries did not reserve the budget: %d of %d in use", budget.InUse(), 2*size)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Meanwhile: 8 concurrent deliveries, refused unread.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var answers []string
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.DefaultClient.Do(request(bytes.NewReader(body)))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				answers = append(answers, err.Error())
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers = append(answers, resp.Status+" Retry-After="+resp.Header.Get("Retry-After")+" "+strings.TrimSpace(string(b)))
		}()
	}
	wg.Wait()
	for _, a := range answers {
		if !strings.HasPrefix(a, "503 Service Unavailable Retry-After=10 ") || !strings.Contains(a, "byte budget") {
			t.Errorf("over the budget: %s", a)
		}
	}
	if n := e.scmCount(); n != 0 {
		t.Errorf("%d events queued while the budget was full", n)
	}

	// One sender finishes its body, the other goes away mid-body.
	go func() { _, _ = slows[0].w.Write(body[size/2:]); _ = slows[0].w.Close() }()
	_ = slows[1].w.CloseWithError(errors.New("sender gone"))
	if code := <-slows[0].code; code != http.StatusAccepted {
		t.Errorf("the slow delivery that completed: HTTP %d", code)
	}
	<-slows[1].code
	for budget.InUse() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("budget after the deliveries ended: %d in use", budget.InUse())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Room again: a full-size delivery is read and queued (a duplicate of the one that completed).
	code, resp := e.post(request(bytes.NewReader(body)))
	if code != http.StatusAccepted || !strings.Contains(resp, `"duplicate"`) {
		t.Errorf("after the budget emptied: HTTP %d %s", code, resp)
	}
	if budget.InUse() != 0 {
		t.Errorf("budget after the last delivery: %d", budget.InUse())
	}
}

func TestLoadWebhooksReadBudget(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PRFLOW_TEST_HOOK", hookSecret)
	write := func(extra string) string {
		p := filepath.Join(dir, "hooks.yaml")
		if err := os.WriteFile(p, []byte("webhooks:\n  - provider: github\n    secret: env:PRFLOW_TEST_HOOK\n"+extra), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	w, err := controller.LoadWebhooks(write(""))
	if err != nil || w.ReadBudget().Limit() != controller.DefaultWebhookReadBudget {
		t.Fatalf("default budget: %v, %v", w, err)
	}
	w, err = controller.LoadWebhooks(write("maxBody: 1048576\nreadBudget: 4194304\n"))
	if err != nil || w.ReadBudget().Limit() != 4<<20 {
		t.Fatalf("readBudget 4 MiB: %v", err)
	}
	for extra, want := range map[string]string{
		"readBudget: -1\n":                     "readBudget: must be ≥ 0",
		"readBudget: 1048576\n":                "readBudget: 1048576 is less than the 26214400 byte body limit (maxBody)",
		"maxBody: 2097152\nreadBudget: 1024\n": "readBudget: 1024 is less than the 2097152 byte body limit",
		"readBudget: lots\n":                   `readBudget: want a whole number, got "lots"`,
	} {
		if _, err := controller.LoadWebhooks(write(extra)); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "hooks.yaml") {
			t.Errorf("%q: err = %v, want %q", extra, err, want)
		}
	}
}

// TestWebhookRefusalReachesSender: a sender still writing a large body that is refused before
// being read (no signature, or over the read budget) gets the answer, not a connection reset.
func TestWebhookRefusalReachesSender(t *testing.T) {
	t.Parallel()
	e := newHookEnv(t, nil, nil, nil, 0)
	cfg := controller.NewWebhooks(0, map[string]string{"github": hookSecret})
	cfg.SetReadBudget(controller.DefaultMaxWebhookBody)
	e.Ctl.SetWebhooks(cfg)
	hold, err := cfg.ReadBudget().Reserve(controller.DefaultMaxWebhookBody) // the budget is full
	if err != nil {
		t.Fatal(err)
	}
	defer hold()
	body := bytes.Repeat([]byte(" "), controller.DefaultMaxWebhookBody)
	var wg sync.WaitGroup
	answers := make([]string, 16)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} // as forges post: one delivery, one connection
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/hooks/github", bytes.NewReader(body))
			req.Header.Set("X-GitHub-Event", "push")
			if i%2 == 1 { // signed: refused by the full budget instead
				req.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex(hookSecret, body))
			}
			resp, err := client.Do(req)
			if err != nil {
				answers[i] = err.Error()
				return
			}
			resp.Body.Close()
			answers[i] = resp.Status + " " + resp.Header.Get("Retry-After")
		}()
	}
	wg.Wait()
	for i, a := range answers {
		want := "401 Unauthorized "
		if i%2 == 1 {
			want = "503 Service Unavailable 10"
		}
		if a != want {
			t.Errorf("sender %d: %q, want %q", i, a, want)
		}
	}
}
