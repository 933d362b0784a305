package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestTokenEscapesInjectively(t *testing.T) {
	cases := map[string]string{
		"web-dev":       "web-dev",
		"guestbook.v2":  "guestbook_2ev2",
		"ns/app":        "ns_2fapp",
		"a_b":           "a_5fb",
		"a_2eb":         "a_5f2eb", // "_2e" written literally must not collide with "."
		"":              "_",
		"prod eu*>":     "prod_20eu_2a_3e",
		"Ünicode":       "_c3_9cnicode",
		"UPPER-lower09": "UPPER-lower09",
	}
	seen := map[string]string{}
	for in, want := range cases {
		got := Token(in)
		if got != want {
			t.Errorf("Token(%q) = %q, want %q", in, got, want)
		}
		if prev, dup := seen[got]; dup {
			t.Errorf("Token(%q) and Token(%q) collide: %q", in, prev, got)
		}
		seen[got] = in
	}
	if k := StatusKey("prod.eu", "shop/web"); k != "prod_2eeu.shop_2fweb" || strings.Count(k, ".") != 1 {
		t.Errorf("StatusKey = %q: want exactly one dot between agent and app", k)
	}
	if InventoryKey("eu") == StatusKey("eu", "_inventory") {
		t.Error("the inventory key collides with an app's status key")
	}
}

func TestSelector(t *testing.T) {
	labels := map[string]string{"env": "dev", "team": "pay", "harness.io/serviceRef": "web"}
	cases := []struct {
		sel   string
		match bool
		err   string
	}{
		{"", true, ""},
		{"env=dev", true, ""},
		{"env==dev,team=pay", true, ""},
		{"env!=prod", true, ""},
		{"env!=dev", false, ""},
		{"env in (dev, staging)", true, ""},
		{"env notin (dev)", false, ""},
		{"harness.io/serviceRef=web", true, ""},
		{"team", true, ""},
		{"!team", false, ""},
		{"missing!=x", true, ""},
		{"env in (dev", false, "want in (v1,v2)"},
		{"env dev x", false, "not a label requirement"},
		{"env=dev,", false, "empty requirement"},
		{"e nv=dev", false, "invalid character"},
	}
	for _, c := range cases {
		s, err := ParseSelector(c.sel)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), c.sel) {
				t.Errorf("ParseSelector(%q) err = %v, want %q naming the selector", c.sel, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseSelector(%q): %v", c.sel, err)
			continue
		}
		if got := s.Matches(labels); got != c.match {
			t.Errorf("%q matches = %v, want %v", c.sel, got, c.match)
		}
	}
}

func TestErrorsMatchByCode(t *testing.T) {
	e := fmt.Errorf("step: %w", &Error{Code: CodeNotFound, Agent: "eu", App: "web", Message: "gone"})
	if !errors.Is(e, ErrNotFound) || errors.Is(e, ErrOffline) {
		t.Fatal("errors.Is must match by code")
	}
	if e.Error() != "step: agent eu, app web: gone" {
		t.Fatalf("message: %q", e.Error())
	}
	if !Transient(&Error{Code: CodeOffline}) || Transient(&Error{Code: CodeUnauthorized}) || Transient(errors.New("x")) {
		t.Fatal("Transient classification wrong")
	}
	var round Error
	b, _ := json.Marshal(&Error{Code: CodeOperationInProgress, Message: "busy"})
	if err := json.Unmarshal(b, &round); err != nil || !errors.Is(&round, ErrOperationInProgress) {
		t.Fatalf("error codes must survive the wire: %s", b)
	}
}

// nats starts an embedded JetStream server with the two buckets the protocol uses.
func natsKV(t *testing.T) (*nats.Conn, jetstream.KeyValue, jetstream.KeyValue) {
	t.Helper()
	s, err := server.NewServer(&server.Options{JetStream: true, StoreDir: t.TempDir(), DontListen: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect("", nats.InProcessServer(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	apps, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "apps"})
	if err != nil {
		t.Fatal(err)
	}
	agents, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "agents", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return nc, apps, agents
}

// RedactURL is what the Argo CD agent and the simulated agent put into errors and logs in place
// of a URL that may carry a token.
func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"token as user", "https://ghp_secret123@git.example/shop.git", "https://redacted@git.example/shop.git"},
		{"user and password", "https://bot:hunter2@argocd.example:8443/api", "https://redacted@argocd.example:8443/api"},
		{"no user info", "https://argocd.example/api?x=1", "https://argocd.example/api?x=1"},
		{"local path", "/srv/release-repo", "/srv/release-repo"},
		{"does not parse", "http://[::1%zz/repo", "http://[::1%zz/repo"},
		{"does not parse, with a password", "https://bot:hunter2%zz@git.example/shop.git", "https://redacted@git.example/shop.git"},
		{"does not parse, token as user", "https://ghp_secret123@[::1%zz/repo", "https://redacted@[::1%zz/repo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RedactURL(tc.in)
			if got != tc.want {
				t.Fatalf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if strings.Contains(got, "secret123") || strings.Contains(got, "hunter2") {
				t.Fatalf("RedactURL(%q) keeps the secret: %q", tc.in, got)
			}
		})
	}
}

func TestWriterWritesChangesOnlyAndKeepsNewest(t *testing.T) {
	_, kv, _ := natsKV(t)
	ctx := context.Background()
	w := NewWriter(kv, "eu", slog.New(slog.NewTextHandler(io.Discard, nil)))
	st := AppStatus{Name: "web", Sync: SyncOutOfSync, Health: HealthMissing, ResourceVersion: "10"}
	steps := []struct {
		name  string
		put   AppStatus
		wrote bool
		sync  string
	}{
		{"first", st, true, SyncOutOfSync},
		{"same again, newer resourceVersion", with(st, func(s *AppStatus) { s.ResourceVersion = "11"; s.ObservedAt = time.Now() }), false, SyncOutOfSync},
		{"changed", with(st, func(s *AppStatus) { s.Sync = SyncSynced; s.ResourceVersion = "12" }), true, SyncSynced},
		{"older view arrives late", with(st, func(s *AppStatus) { s.Sync = SyncUnknown; s.ResourceVersion = "9" }), false, SyncSynced},
	}
	for _, s := range steps {
		wrote, err := w.Put(ctx, s.put)
		if err != nil || wrote != s.wrote {
			t.Fatalf("%s: wrote=%v err=%v, want wrote=%v", s.name, wrote, err, s.wrote)
		}
		e, _ := kv.Get(ctx, StatusKey("eu", "web"))
		var got AppStatus
		if err := DecodeStatus(e.Value(), &got); err != nil || got.Sync != s.sync || got.Agent != "eu" {
			t.Fatalf("%s: stored %+v (%v)", s.name, got, err)
		}
	}
	// Another writer (a second replica that believed it led) wrote a newer state meanwhile.
	other := NewWriter(kv, "eu", nil)
	if err := other.Seed(ctx); err != nil {
		t.Fatal(err)
	}
	if wrote, err := other.Put(ctx, with(st, func(s *AppStatus) { s.Health = HealthHealthy; s.ResourceVersion = "20" })); err != nil || !wrote {
		t.Fatalf("other writer: %v %v", wrote, err)
	}
	if wrote, err := w.Put(ctx, with(st, func(s *AppStatus) { s.Health = HealthProgressing; s.ResourceVersion = "15" })); err != nil || wrote {
		t.Fatalf("a stale writer must not overwrite a newer record: wrote=%v err=%v", wrote, err)
	}
	// Deletion, then an older view of the app: it stays deleted; the inventory notes both.
	if err := w.FlushInventory(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete(ctx, "web", "30", "test deletion"); err != nil {
		t.Fatal(err)
	}
	if wrote, _ := w.Put(ctx, with(st, func(s *AppStatus) { s.ResourceVersion = "25" })); wrote {
		t.Fatal("an app deleted at rv 30 came back from an rv 25 view")
	}
	if e, err := kv.Get(ctx, StatusKey("eu", "web")); err != nil || !strings.Contains(string(e.Value()), `"deleted"`) {
		t.Fatalf("record not replaced by a tombstone: %v", err)
	}
	if err := w.FlushInventory(ctx); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, InventoryKey("eu"))
	var inv Inventory
	if err != nil || json.Unmarshal(e.Value(), &inv) != nil || inv.Apps != 0 || e.Revision() < 2 {
		t.Fatalf("inventory: %v %+v", err, inv)
	}
}

func TestRetainDeletesOnlyWhatTheListLacks(t *testing.T) {
	_, kv, _ := natsKV(t)
	ctx := context.Background()
	w := NewWriter(kv, "eu", nil)
	for i, n := range []string{"a", "b", "c"} {
		if _, err := w.Put(ctx, AppStatus{Name: n, ResourceVersion: fmt.Sprint(10 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	// A list taken at rv 11 lacks b and c; c was seen at rv 12, after the list: keep it.
	if err := w.Retain(ctx, map[string]bool{"a": true}, "11"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(w.Known(), ","); got != "a,c" {
		t.Fatalf("known after retain = %s, want a,c", got)
	}
}

type echoHandler struct{}

func (echoHandler) Sync(_ context.Context, req SyncRequest) ([]SyncResult, error) {
	out := make([]SyncResult, len(req.Apps))
	for i, a := range req.Apps {
		out[i] = SyncResult{App: a, Revision: "rev-" + req.RunID}
		if a == "locked" {
			out[i].Error = &Error{Code: CodeOperationInProgress, App: a, Message: "busy"}
		}
	}
	return out, nil
}

func (echoHandler) Apps(_ context.Context, q AppsQuery) ([]AppStatus, error) {
	if q.NameRegex == "(" {
		return nil, Errorf(CodeInvalid, "bad regex")
	}
	return []AppStatus{{Name: "one"}}, nil
}

func (echoHandler) Get(_ context.Context, req GetRequest) (*AppStatus, error) {
	if req.App == "ghost" {
		return nil, Errorf(CodeNotFound, "no such app")
	}
	return &AppStatus{Name: req.App, Revision: string(req.Refresh)}, nil
}

func TestClientAndServeRoundTrip(t *testing.T) {
	nc, apps, agents := natsKV(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := NewClient(nc, apps, agents)
	c.Timeout = 5 * time.Minute

	// Not registered: a clear error at once, naming the agent.
	if _, err := c.Apps(ctx, "eu", AppsQuery{}); !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), "agent eu") {
		t.Fatalf("unregistered agent: %v", err)
	}
	hbCtx, stopHB := context.WithCancel(ctx)
	hb, err := Heartbeat(hbCtx, agents, time.Hour, func() Registration { return Registration{Agent: "eu", Replica: "r1", Kind: "test"} }, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Registered but nobody listens (the agent's subscription is gone): NATS says at once.
	if _, err := c.Apps(ctx, "eu", AppsQuery{}); !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), "no replica listens") {
		t.Fatalf("registered but not listening: %v", err)
	}
	wait, err := Serve(ctx, nc, "eu", echoHandler{}, ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Sync(ctx, "eu", SyncRequest{Apps: []string{"web", "locked"}, RunID: "r9"})
	if err != nil || len(rep.Results) != 2 || rep.Results[0].Revision != "rev-r9" ||
		!errors.Is(rep.Results[1].Error, ErrOperationInProgress) || rep.Results[1].Error.Agent != "eu" {
		t.Fatalf("sync round trip: %+v %v", rep, err)
	}
	if _, err := c.Sync(ctx, "eu", SyncRequest{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty sync: %v", err)
	}
	if _, err := c.Apps(ctx, "eu", AppsQuery{NameRegex: "("}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "agent eu") {
		t.Fatalf("handler error: %v", err)
	}
	got, err := c.Get(ctx, "eu", "web", RefreshHard)
	if err != nil || got.Name != "web" || got.Revision != "hard" {
		t.Fatalf("get: %+v %v", got, err)
	}
	var ae *Error
	if _, err := c.Get(ctx, "eu", "ghost", ""); !errors.As(err, &ae) || ae.Code != CodeNotFound || ae.App != "ghost" {
		t.Fatalf("get ghost: %v", err)
	}
	cancel()
	wait()
	stopHB()
	<-hb
	if _, err := NewClient(nc, apps, agents).Registered(context.Background(), "eu"); !errors.Is(err, ErrOffline) {
		t.Fatalf("a stopped agent must deregister: %v", err)
	}
}

func with(s AppStatus, f func(*AppStatus)) AppStatus {
	f(&s)
	return s
}
