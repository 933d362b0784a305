package audit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/queue"
)

func openNATS(t *testing.T) *queue.Conn {
	t.Helper()
	conn, err := queue.Open(context.Background(), queue.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

func streamConfig(t *testing.T, js jetstream.JetStream) (jetstream.StreamConfig, jetstream.StreamState) {
	t.Helper()
	s, err := js.Stream(context.Background(), audit.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.Config, info.State
}

// TestSetupRetention: the limits given are the stream's (read back from the server), a second
// Setup updates an existing stream's limits, negative limits are refused, and a size limit
// drops the oldest entries while new ones are still appended.
func TestSetupRetention(t *testing.T) {
	conn := openNATS(t)
	ctx := context.Background()
	if err := audit.Setup(ctx, conn.JS, 1, audit.Retention{MaxAge: 48 * time.Hour, MaxBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	cfg, _ := streamConfig(t, conn.JS)
	if cfg.MaxAge != 48*time.Hour || cfg.MaxBytes != 64<<20 || cfg.Discard != jetstream.DiscardOld || cfg.Retention != jetstream.LimitsPolicy {
		t.Fatalf("stream config after Setup: max age %s, max bytes %d, discard %v, retention %v", cfg.MaxAge, cfg.MaxBytes, cfg.Discard, cfg.Retention)
	}
	if err := audit.Setup(ctx, conn.JS, 1, audit.Retention{}); err != nil {
		t.Fatal(err)
	}
	if cfg, _ := streamConfig(t, conn.JS); cfg.MaxAge != 0 || cfg.MaxBytes != -1 {
		t.Fatalf("no limits: max age %s, max bytes %d", cfg.MaxAge, cfg.MaxBytes)
	}
	for _, r := range []audit.Retention{{MaxAge: -time.Hour}, {MaxBytes: -1}} {
		if err := audit.Setup(ctx, conn.JS, 1, r); err == nil || !strings.Contains(err.Error(), "negative") {
			t.Errorf("Setup(%+v): %v, want a refusal", r, err)
		}
	}
	if cfg, _ := streamConfig(t, conn.JS); cfg.MaxAge != 0 || cfg.MaxBytes != -1 {
		t.Fatalf("a refused Setup changed the stream: max age %s, max bytes %d", cfg.MaxAge, cfg.MaxBytes)
	}

	const limit = 16 << 10
	if err := audit.Setup(ctx, conn.JS, 1, audit.Retention{MaxAge: time.Hour, MaxBytes: limit}); err != nil {
		t.Fatal(err)
	}
	l := &audit.Log{JS: conn.JS}
	for i := range 300 {
		if err := l.Append(ctx, audit.Entry{Actor: "alice", Action: audit.RunStarted, Run: fmt.Sprintf("r%03d", i), Detail: strings.Repeat("d", 100)}); err != nil {
			t.Fatal(err)
		}
	}
	_, st := streamConfig(t, conn.JS)
	if st.Bytes > limit || st.FirstSeq == 1 || st.LastSeq != 300 {
		t.Fatalf("with max bytes %d: %d bytes, seq %d..%d", limit, st.Bytes, st.FirstSeq, st.LastSeq)
	}
	got, err := l.Query(ctx, audit.Filter{Run: "r299"})
	if err != nil || len(got) != 1 {
		t.Fatalf("newest entry: %+v %v", got, err)
	}
	if got, _ := l.Query(ctx, audit.Filter{Run: "r000"}); len(got) != 0 {
		t.Fatalf("the oldest entry survived the size limit: %+v", got)
	}
}

// TestAppendOnceAndFilters: an entry with an ID is stored once however often it is appended;
// filters by action family, run (also a webhook's runs) and remote host select the right ones.
func TestAppendOnceAndFilters(t *testing.T) {
	conn := openNATS(t)
	ctx := context.Background()
	if err := audit.Setup(ctx, conn.JS, 1, audit.DefaultRetention); err != nil {
		t.Fatal(err)
	}
	l := &audit.Log{JS: conn.JS}
	entries := []audit.Entry{
		{Actor: "webhook:github:octocat", Action: audit.WebhookAccepted, Runs: []string{"r1", "r2"}, Remote: "10.0.0.7:5123", Delivery: "d1", ID: "webhook.accepted/github/d1"},
		{Actor: "webhook:github:octocat", Action: audit.WebhookAccepted, Runs: []string{"r1", "r2"}, Remote: "10.0.0.7:5123", Delivery: "d1", ID: "webhook.accepted/github/d1"},
		{Actor: "webhook:github", Action: audit.WebhookRejected, Remote: "10.0.0.8:1"},
		{Actor: "webhook:github:octocat", Action: audit.RunStarted, Run: "r2", Remote: "10.0.0.7:5123"},
		{Actor: "unauthenticated", Action: audit.AuthFailed, Remote: "[::1]:4000"},
	}
	for _, e := range entries {
		if err := l.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		f    audit.Filter
		want int
	}{
		{audit.Filter{}, 4},
		{audit.Filter{Actions: []string{"webhook.*"}}, 2},
		{audit.Filter{Actions: []string{audit.WebhookAccepted, audit.AuthFailed}}, 2},
		{audit.Filter{Run: "r2"}, 2},
		{audit.Filter{Run: "r1"}, 1},
		{audit.Filter{Remote: "10.0.0.7"}, 2},
		{audit.Filter{Remote: "::1"}, 1},
		{audit.Filter{Remote: "10.0.0.8:1"}, 1},
		{audit.Filter{Actor: "webhook:github:octocat", Actions: []string{"run.*"}}, 1},
		{audit.Filter{Limit: 1}, 1},
	} {
		got, err := l.Query(ctx, tc.f)
		if err != nil || len(got) != tc.want {
			t.Errorf("Query(%+v): %d entries %v, want %d: %+v", tc.f, len(got), err, tc.want, got)
		}
	}
	if _, err := l.Query(ctx, audit.Filter{Actions: []string{"run.strated"}}); !errors.Is(err, audit.ErrFilter) {
		t.Errorf("a typo in an action filter: %v", err)
	}
	for _, bad := range []string{"", "run", "run.started.x", "run.*", "a b.c"} {
		if err := l.Append(ctx, audit.Entry{Actor: "x", Action: bad}); err == nil {
			t.Errorf("Append with action %q succeeded", bad)
		}
	}
}

func TestCheckAction(t *testing.T) {
	for _, ok := range []string{audit.RunStarted, audit.TokenUsed, audit.AuthFailed, audit.WebhookAccepted, "webhook.*", "signal.*", "signal.wake", "token.*"} {
		if err := audit.CheckAction(ok); err != nil {
			t.Errorf("CheckAction(%q): %v", ok, err)
		}
	}
	for bad, hint := range map[string]string{"run.strated": `"run.started"`, "webhok.*": `"webhook.*"`, "tokens.used": `"token.used"`,
		"run.>": "", ">": "", "signal.": "", "webhook": "", "auth.failed.x": ""} {
		err := audit.CheckAction(bad)
		if !errors.Is(err, audit.ErrFilter) || !strings.Contains(err.Error(), hint) || !strings.Contains(err.Error(), "known: ") {
			t.Errorf("CheckAction(%q): %v, want ErrFilter naming %s", bad, err, hint)
		}
	}
}

// TestLimiter: a host records its burst, then one entry per interval, and that entry counts
// what was not recorded; other hosts have their own budget; the overall budget caps many
// hosts together; host state stays bounded.
func TestLimiter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	l := audit.NewLimiter(audit.WithClock(clock), audit.PerHost(10*time.Second, 3), audit.Overall(time.Second, 10))
	allowed := 0
	for range 1000 {
		if ok, _ := l.Allow("192.0.2.1:" + fmt.Sprint(40000+allowed)); ok { // a new port per try: still one host
			allowed++
		}
	}
	if allowed != 3 {
		t.Fatalf("a flood from one host recorded %d entries, want 3", allowed)
	}
	if ok, _ := l.Allow("192.0.2.2:1"); !ok {
		t.Fatal("another host was refused its own budget")
	}
	now = now.Add(10 * time.Second)
	if ok, lost := l.Allow("192.0.2.1:9"); !ok || lost != 997 {
		t.Fatalf("after the interval: ok %v, lost %d, want true 997", ok, lost)
	}
	if ok, lost := l.Allow("192.0.2.1:9"); ok || lost != 0 {
		t.Fatalf("right after: ok %v, lost %d", ok, lost)
	}
	// Many hosts at once: the overall burst (10) holds.
	now = now.Add(time.Hour)
	allowed = 0
	for i := range 500 {
		if ok, _ := l.Allow(fmt.Sprintf("198.51.100.%d:1", i%250)); ok {
			allowed++
		}
	}
	if allowed != 10 {
		t.Fatalf("a flood from 250 hosts recorded %d entries, want 10 (the overall burst)", allowed)
	}
}
