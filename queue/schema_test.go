package queue

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestSetupRecordsSchema: Setup writes the marker; a second Setup at the same version and
// replicas leaves it (and the streams) alone; a topology from before markers gets one.
func TestSetupRecordsSchema(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := openTopology(t)
	s, err := ReadSchema(ctx, c.JS)
	if err != nil || s == nil || s.Version != SchemaVersion || s.Replicas != 1 {
		t.Fatalf("marker = %+v, %v", s, err)
	}
	meta, _ := c.JS.KeyValue(ctx, BucketMeta)
	e1, _ := meta.Get(ctx, SchemaKey)
	if err := Setup(ctx, c.JS, 1); err != nil {
		t.Fatal(err)
	}
	if e2, _ := meta.Get(ctx, SchemaKey); e2.Revision() != e1.Revision() {
		t.Fatalf("a second Setup rewrote the marker (revision %d → %d)", e1.Revision(), e2.Revision())
	}
	// Pre-marker topology: the marker is gone, Setup writes it again.
	if err := meta.Delete(ctx, SchemaKey); err != nil {
		t.Fatal(err)
	}
	if err := Setup(ctx, c.JS, 1); err != nil {
		t.Fatal(err)
	}
	if s, err := ReadSchema(ctx, c.JS); err != nil || s == nil || s.Version != SchemaVersion {
		t.Fatalf("marker after an upgrade from no marker = %+v, %v", s, err)
	}
}

// TestNewerSchemaRefused: a topology written by a newer prflow makes Setup and Join fail with
// ErrSchemaNewer, naming both versions, and Setup changes nothing.
func TestNewerSchemaRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := openTopology(t)
	meta, _ := c.JS.KeyValue(ctx, BucketMeta)
	newer, _ := json.Marshal(Schema{Version: SchemaVersion + 1, Replicas: 1})
	if _, err := meta.Put(ctx, SchemaKey, newer); err != nil {
		t.Fatal(err)
	}
	// A newer prflow changed a stream: an older Setup must not change it back.
	s, _ := c.JS.Stream(ctx, StreamLogs)
	info, _ := s.Info(ctx)
	cfg := info.Config
	cfg.Description = "changed by a newer prflow"
	if _, err := c.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for name, fn := range map[string]func() error{
		"Setup R1": func() error { return Setup(ctx, c.JS, 1) },
		"Setup R3": func() error { return Setup(ctx, c.JS, 3) },
		"Join":     func() error { return Join(ctx, c.JS, slog.New(slog.DiscardHandler)) },
	} {
		err := fn()
		if !errors.Is(err, ErrSchemaNewer) {
			t.Fatalf("%s against a newer schema: %v", name, err)
		}
		want := []string{"schema version 2", "knows up to 1", "upgrade this process"}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", name, err, w)
			}
		}
	}
	info, _ = s.Info(ctx)
	if info.Config.Description != "changed by a newer prflow" {
		t.Fatalf("Setup changed a newer topology's stream: %q", info.Config.Description)
	}
	// Garbage in the marker is refused too, not taken for "no marker".
	if _, err := meta.Put(ctx, SchemaKey, []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if err := Setup(ctx, c.JS, 1); !errors.Is(err, ErrSchemaNewer) || !strings.Contains(err.Error(), "not a schema marker") {
		t.Fatalf("Setup over a bad marker: %v", err)
	}
}

// TestJoinWaitsForTopology: a worker that starts before any server created the topology waits
// (and says so) and proceeds once it exists; it never creates anything itself.
func TestJoinWaitsForTopology(t *testing.T) {
	c := open(t)
	short, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if err := Join(short, c.JS, slog.New(slog.DiscardHandler)); !errors.Is(err, ErrNoTopology) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Join with no topology: %v", err)
	}
	if _, err := c.JS.Stream(context.Background(), StreamJobs); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("Join created the jobs stream: %v", err)
	}
	ctx, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- Join(ctx, c.JS, slog.New(slog.NewTextHandler(logs, nil))) }()
	for !strings.Contains(logs.String(), "waiting for a prflow server") {
		select {
		case err := <-done:
			t.Fatalf("Join returned before the topology existed: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := Setup(ctx, c.JS, 1); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Join after Setup: %v", err)
	}
}
