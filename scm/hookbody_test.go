package scm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingReader counts the body bytes a parser read; it can block each read until let goes,
// fail after a number of bytes, and run a hook on each read (to look at the spill directory
// while the body is being read).
type countingReader struct {
	r      io.Reader
	n      atomic.Int64
	gate   chan struct{} // when set, every read waits for a value on it (or its close)
	failAt int64         // when > 0, reading past this many bytes fails like a dropped connection
	onRead func()
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.gate != nil {
		<-c.gate
	}
	if c.onRead != nil {
		c.onRead()
	}
	if c.failAt > 0 && c.n.Load() >= c.failAt {
		return 0, errors.New("connection reset by peer")
	}
	if c.failAt > 0 {
		p = p[:min(int64(len(p)), c.failAt-c.n.Load())]
	}
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingReader) Close() error { return nil }

// spilled lists the spill files in dir.
func spilled(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "prflow-webhook-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Everything refusable from the headers is refused before one body byte is read.
func TestWebhookRefusedBeforeReading(t *testing.T) {
	secret := []byte("s3cret-value")
	body := bytes.Repeat([]byte("x"), 4096)
	full := NewReadBudget(1024)
	hold, err := full.Reserve(1000)
	if err != nil {
		t.Fatal(err)
	}
	defer hold()
	tests := []struct {
		name     string
		s        WebhookSettings
		secret   []byte
		sig      string
		chunked  bool
		sentinel error
		msg      string
	}{
		{name: "no secret configured", sig: sign(body, secret), sentinel: ErrBadSignature, msg: "no webhook secret configured"},
		{name: "missing signature", secret: secret, sentinel: ErrBadSignature, msg: "missing X-Sig header"},
		{name: "not sha256", secret: secret, sig: "sha1=00", sentinel: ErrBadSignature, msg: "not of the form sha256=<hex>"},
		{name: "not hex", secret: secret, sig: "sha256=xyz", sentinel: ErrBadSignature, msg: "X-Sig is not hex"},
		{name: "content-length over the limit", s: WebhookSettings{MaxBody: 100}, secret: secret, sig: sign(body, secret), sentinel: ErrTooLarge, msg: "body of 4096 bytes exceeds the 100 byte limit"},
		{name: "budget full", s: WebhookSettings{Budget: full}, secret: secret, sig: sign(body, secret), sentinel: ErrBusy, msg: "1000 bytes are being read, 4096 more would exceed the 1024 byte budget"},
		{name: "budget full, chunked", s: WebhookSettings{Budget: full, MaxBody: 512}, secret: secret, sig: sign(body, secret), chunked: true, sentinel: ErrBusy, msg: "512 more would exceed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := hookReq("thing", body, map[string]string{"X-Sig": tt.sig})
			cr := &countingReader{r: r.Body}
			r.Body = cr
			if tt.chunked {
				r.ContentLength = -1
			}
			var parsed []string
			_, err := tt.s.Parse(r, tt.secret, testFormat(&parsed))
			if !errors.Is(err, tt.sentinel) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %v saying %q", err, tt.sentinel, tt.msg)
			}
			if cr.n.Load() != 0 {
				t.Errorf("%d body bytes were read before the refusal", cr.n.Load())
			}
			if len(parsed) != 0 {
				t.Errorf("parser ran: %q", parsed)
			}
		})
	}
	if got := full.InUse(); got != 1000 {
		t.Errorf("refused requests changed the budget: %d in use, want 1000", got)
	}
}

// Past MemBody the body goes to a spill file while it is read; the file is gone once Parse
// returns, whatever the outcome, and the budget is back where it was.
func TestWebhookSpill(t *testing.T) {
	secret := []byte("s3cret-value")
	body := []byte(`{"pad":"` + strings.Repeat("p", 64<<10) + `"}`)
	dir := t.TempDir()
	budget := NewReadBudget(1 << 20)
	s := WebhookSettings{MemBody: 1024, TempDir: dir, Budget: budget}
	tests := []struct {
		name     string
		sig      string
		max      int64
		chunked  bool
		failAt   int64
		sentinel error
		msg      string
	}{
		{name: "good signature", sig: sign(body, secret)},
		{name: "wrong signature", sig: sign(body, []byte("other")), sentinel: ErrBadSignature, msg: "X-Sig does not match the body"},
		{name: "tampered", sig: sign(append([]byte(nil), body[:len(body)-2]...), secret), sentinel: ErrBadSignature, msg: "does not match"},
		{name: "chunked over the limit", sig: sign(body, secret), max: 32 << 10, chunked: true, sentinel: ErrTooLarge, msg: "exceeds the 32768 byte limit"},
		{name: "client gone mid-body", sig: sign(body, secret), failAt: 20 << 10, msg: "read body: connection reset by peer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := hookReq("thing", body, map[string]string{"X-Sig": tt.sig, "X-Delivery": "d-1"})
			sawSpill := false
			cr := &countingReader{r: r.Body, failAt: tt.failAt}
			cr.onRead = func() {
				if cr.n.Load() > 2048 && len(spilled(t, dir)) == 1 {
					sawSpill = true
				}
			}
			r.Body = cr
			if tt.chunked {
				r.ContentLength = -1
			}
			s := s
			if tt.max > 0 {
				s.MaxBody = tt.max
			}
			var parsed []string
			ev, err := s.Parse(r, secret, testFormat(&parsed))
			if tt.msg == "" {
				if err != nil || ev == nil || len(parsed) != 1 || parsed[0] != "thing:"+string(body) {
					t.Fatalf("got %+v, %v; parser saw %d bodies", ev, err, len(parsed))
				}
			} else {
				if err == nil || !strings.Contains(err.Error(), tt.msg) || tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
					t.Fatalf("err = %v, want %v saying %q", err, tt.sentinel, tt.msg)
				}
				if len(parsed) != 0 {
					t.Errorf("a refused body reached the parser")
				}
			}
			if !sawSpill {
				t.Error("the body past MemBody never went to a spill file")
			}
			if left := spilled(t, dir); len(left) != 0 {
				t.Errorf("spill files left behind: %v", left)
			}
			if budget.InUse() != 0 {
				t.Errorf("budget not given back: %d in use", budget.InUse())
			}
		})
	}
	// A body within MemBody never touches the disk.
	small := []byte(`{"ok":true}`)
	r := hookReq("thing", small, map[string]string{"X-Sig": sign(small, secret)})
	cr := &countingReader{r: r.Body}
	cr.onRead = func() {
		if len(spilled(t, dir)) != 0 {
			t.Error("a small body was spilled")
		}
	}
	r.Body = cr
	if _, err := s.Parse(r, secret, testFormat(nil)); err != nil {
		t.Fatal(err)
	}
}

// When the spill file cannot be written the error says so (a server fault, not the client's).
func TestWebhookSpillFailure(t *testing.T) {
	secret := []byte("k")
	body := bytes.Repeat([]byte("x"), 8<<10)
	budget := NewReadBudget(0)
	s := WebhookSettings{MemBody: 1024, TempDir: filepath.Join(t.TempDir(), "missing"), Budget: budget}
	_, err := s.Parse(hookReq("thing", body, map[string]string{"X-Sig": sign(body, secret)}), secret, testFormat(nil))
	if err == nil || !errors.Is(err, ErrSpill) || !strings.Contains(err.Error(), "could not spill the webhook body past 1024 bytes to a temporary file") || errors.Is(err, ErrBadSignature) {
		t.Fatalf("err = %v", err)
	}
	if budget.InUse() != 0 {
		t.Errorf("budget not given back: %d", budget.InUse())
	}
}

// A parser that panics still gives its reservation back (net/http recovers the panic).
func TestWebhookBudgetReleasedOnPanic(t *testing.T) {
	secret := []byte("k")
	body := []byte(`{}`)
	budget := NewReadBudget(100)
	f := testFormat(nil)
	f.Parse = func(*http.Request, *Hook) ([]*Event, error) { panic("parser bug") }
	func() {
		defer func() { _ = recover() }()
		_, _ = (WebhookSettings{Budget: budget}).Parse(hookReq("thing", body, map[string]string{"X-Sig": sign(body, secret)}), secret, f)
	}()
	if budget.InUse() != 0 {
		t.Errorf("budget after a panic: %d in use", budget.InUse())
	}
}

// Concurrent deliveries share the budget: while two bodies fill it, the others are refused
// unread with ErrBusy; once those two are done the budget is empty again and a new one fits.
func TestWebhookBudgetConcurrent(t *testing.T) {
	secret := []byte("k")
	body := bytes.Repeat([]byte("b"), 1000)
	sig := sign(body, secret)
	budget := NewReadBudget(2000)
	s := WebhookSettings{Budget: budget, TempDir: t.TempDir(), MemBody: 100}
	gate := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		r := hookReq("thing", body, map[string]string{"X-Sig": sig})
		r.Body = &countingReader{r: r.Body, gate: gate}
		wg.Go(func() {
			_, errs[i] = s.Parse(r, secret, testFormat(nil))
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for budget.InUse() != 2000 {
		if time.Now().After(deadline) {
			t.Fatalf("the two readers did not reserve the budget: %d in use", budget.InUse())
		}
		time.Sleep(time.Millisecond)
	}
	var busy sync.WaitGroup
	var refused, readBytes atomic.Int64
	for range 16 {
		busy.Go(func() {
			r := hookReq("thing", body, map[string]string{"X-Sig": sig})
			cr := &countingReader{r: r.Body}
			r.Body = cr
			if _, err := s.Parse(r, secret, testFormat(nil)); errors.Is(err, ErrBusy) {
				refused.Add(1)
			}
			readBytes.Add(cr.n.Load())
		})
	}
	busy.Wait()
	if refused.Load() != 16 || readBytes.Load() != 0 {
		t.Errorf("over the budget: %d of 16 refused, %d bytes read", refused.Load(), readBytes.Load())
	}
	close(gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("reader %d: %v", i, err)
		}
	}
	if budget.InUse() != 0 {
		t.Errorf("after the readers finished: %d in use", budget.InUse())
	}
	if _, err := s.Parse(hookReq("thing", body, map[string]string{"X-Sig": sig}), secret, testFormat(nil)); err != nil {
		t.Errorf("after the budget emptied: %v", err)
	}
}

func TestReadBudgetReleaseOnce(t *testing.T) {
	b := NewReadBudget(10)
	rel, err := b.Reserve(10)
	if err != nil {
		t.Fatal(err)
	}
	rel()
	rel()
	if b.InUse() != 0 {
		t.Errorf("a double release gave back twice: %d", b.InUse())
	}
	if _, err := b.Reserve(11); !errors.Is(err, ErrBusy) {
		t.Errorf("a request over the whole budget: %v", err)
	}
	var nilBudget *ReadBudget
	if rel, err := nilBudget.Reserve(1 << 40); err != nil {
		t.Errorf("nil budget: %v", err)
	} else {
		rel()
	}
	if got := fmt.Sprint(NewReadBudget(0).Limit()); got != fmt.Sprint(DefaultWebhookReadBudget) {
		t.Errorf("default budget = %s", got)
	}
}
