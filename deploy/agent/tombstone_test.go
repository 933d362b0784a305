package agent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A deleted app leaves a tombstone that says when and why, keeps the app's identity, is not
// a live app to any reader, and is not marked stale with the live records.
func TestDeletedAppLeavesATombstone(t *testing.T) {
	nc, kv, agents := natsKV(t)
	ctx := context.Background()
	w := NewWriter(kv, "eu", nil)
	created := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
	live := AppStatus{Name: "web", ApplicationSet: "web-set", Cluster: "in-cluster", Namespace: "web", Labels: map[string]string{"env": "dev"},
		Sync: SyncSynced, Health: HealthHealthy, UID: "uid-1", CreatedAt: created, ResourceVersion: "10",
		Operation: &Operation{Phase: PhaseRunning, RunID: "r1"}}
	if _, err := w.Put(ctx, live); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Put(ctx, AppStatus{Name: "api", UID: "uid-2", ResourceVersion: "11"}); err != nil {
		t.Fatal(err)
	}
	before := time.Now().UTC().Add(-time.Second)
	if err := w.Delete(ctx, "web", "12", "Argo CD reported it DELETED"); err != nil {
		t.Fatal(err)
	}
	c := NewClient(nc, kv, agents)
	st, err := c.Status(ctx, "eu", "web")
	if st != nil || !errors.Is(err, ErrDeleted) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("Status of a deleted app = %+v, %v; want nil and ErrDeleted (also ErrNotFound)", st, err)
	}
	var ae *Error
	if !errors.As(err, &ae) || !strings.HasPrefix(ae.Message, "app web was deleted at 20") || !strings.Contains(ae.Message, "(Argo CD reported it DELETED)") {
		t.Fatalf("deleted message = %q", err)
	}
	e, err := kv.Get(ctx, StatusKey("eu", "web"))
	if err != nil {
		t.Fatal(err)
	}
	var ts AppStatus
	if err := DecodeStatus(e.Value(), &ts); err != nil {
		t.Fatal(err)
	}
	if !ts.Gone() || ts.Deleted.At.Before(before) || ts.UID != "uid-1" || !ts.CreatedAt.Equal(created) || ts.ApplicationSet != "web-set" ||
		ts.Cluster != "in-cluster" || ts.Namespace != "web" || ts.ResourceVersion != "12" {
		t.Fatalf("tombstone = %+v", ts)
	}
	if ts.Sync != "" || ts.Health != "" || ts.Operation != nil || ts.Labels != nil {
		t.Fatalf("a tombstone must carry no status a reader could take for a live app: %+v", ts)
	}
	var generic map[string]any
	_ = json.Unmarshal(e.Value(), &generic)
	if !Tombstone(generic) {
		t.Fatal("Tombstone() does not recognise the record")
	}
	live2 := map[string]any{}
	b, _ := json.Marshal(live)
	_ = json.Unmarshal(b, &live2)
	if Tombstone(live2) {
		t.Fatal("Tombstone() takes a live record for a tombstone")
	}
	if got := strings.Join(w.Known(), ","); got != "api" {
		t.Fatalf("known = %s, want api", got)
	}
	// An outage marks the live records, not the tombstone.
	if n, err := w.MarkStale(ctx, Staleness{Since: time.Now(), Reason: "stream down"}); err != nil || n != 1 {
		t.Fatalf("MarkStale = %d, %v; want 1 (the live app only)", n, err)
	}
	if _, err := c.Status(ctx, "eu", "web"); !errors.Is(err, ErrDeleted) {
		t.Fatalf("after MarkStale: %v", err)
	}
	if err := w.FlushInventory(ctx); err != nil {
		t.Fatal(err)
	}
	ie, _ := kv.Get(ctx, InventoryKey("eu"))
	var inv Inventory
	if json.Unmarshal(ie.Value(), &inv) != nil || inv.Apps != 1 {
		t.Fatalf("inventory counts %d apps, want 1 (tombstones are not apps)", inv.Apps)
	}
}

// An app created again under the same name replaces its tombstone, also when another
// writer (a new leader) does it, and an older view never brings the deleted app back.
func TestRecreatedAppReplacesItsTombstone(t *testing.T) {
	nc, kv, agents := natsKV(t)
	ctx := context.Background()
	w := NewWriter(kv, "eu", nil)
	if _, err := w.Put(ctx, AppStatus{Name: "web", UID: "uid-1", ResourceVersion: "10", Sync: SyncSynced}); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete(ctx, "web", "20", "gone"); err != nil {
		t.Fatal(err)
	}
	// A new leader seeds from the bucket: it knows the tombstone, so a late view of the old
	// app (rv 15) is refused, and the app created again (rv 30) replaces it.
	nw := NewWriter(kv, "eu", nil)
	if err := nw.Seed(ctx); err != nil {
		t.Fatal(err)
	}
	if len(nw.Known()) != 0 {
		t.Fatalf("a seeded writer takes a tombstone for an app: %v", nw.Known())
	}
	if wrote, err := nw.Put(ctx, AppStatus{Name: "web", UID: "uid-1", ResourceVersion: "15", Sync: SyncOutOfSync}); err != nil || wrote {
		t.Fatalf("an older view of the deleted app was written: %v %v", wrote, err)
	}
	if wrote, err := nw.Put(ctx, AppStatus{Name: "web", UID: "uid-2", ResourceVersion: "30", Sync: SyncOutOfSync}); err != nil || !wrote {
		t.Fatalf("the recreated app was not written: %v %v", wrote, err)
	}
	st, err := NewClient(nc, kv, agents).Status(ctx, "eu", "web")
	if err != nil || st.UID != "uid-2" || st.Gone() {
		t.Fatalf("Status after recreation = %+v, %v", st, err)
	}
	// The old writer, not knowing, sweeps its tombstone: the live record must stay.
	if _, err := w.Sweep(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if st, err := NewClient(nc, kv, agents).Status(ctx, "eu", "web"); err != nil || st.UID != "uid-2" {
		t.Fatalf("Sweep removed a live record: %+v, %v", st, err)
	}
}

// Tombstones end: Sweep removes those older than the TTL and leaves younger ones.
func TestSweepRemovesOnlyOldTombstones(t *testing.T) {
	_, kv, _ := natsKV(t)
	ctx := context.Background()
	w := NewWriter(kv, "eu", nil)
	for _, n := range []string{"a", "b"} {
		if _, err := w.Put(ctx, AppStatus{Name: n, ResourceVersion: "1"}); err != nil {
			t.Fatal(err)
		}
		if err := w.Delete(ctx, n, "2", "gone"); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := w.Sweep(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("Sweep(1h) right after the deletions = %d, %v; want 0", n, err)
	}
	if n, err := w.Sweep(ctx, 0); err != nil || n != 2 {
		t.Fatalf("Sweep(0) = %d, %v; want 2", n, err)
	}
	for _, n := range []string{"a", "b"} {
		if _, err := kv.Get(ctx, StatusKey("eu", n)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("tombstone of %s still there: %v", n, err)
		}
	}
	// Swept, yet still guarded for a while: a stale view does not resurrect the app.
	if wrote, _ := w.Put(ctx, AppStatus{Name: "a", ResourceVersion: "1"}); wrote {
		t.Fatal("a swept app came back from an older view")
	}
	if n, err := w.Sweep(ctx, 0); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v", n, err)
	}
}
