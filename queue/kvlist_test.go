package queue

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// setupBuckets is a server with prflow's topology and the buckets as components open them.
func setupBuckets(t *testing.T) (*Conn, *Buckets) {
	t.Helper()
	c := openTopology(t)
	ctx := context.Background()
	b, err := OpenBuckets(ctx, c.JS)
	if err != nil {
		t.Fatal(err)
	}
	return c, b
}

// consumersCreated counts the consumers the server creates from now on (its advisories).
func consumersCreated(t *testing.T, c *Conn) func() int64 {
	t.Helper()
	var n atomic.Int64
	sub, err := c.NC.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.CREATED.>", func(*nats.Msg) { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := c.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() int64 {
		_ = c.NC.Flush()
		time.Sleep(100 * time.Millisecond) // advisories are sent asynchronously
		return n.Load()
	}
}

func listFiltered(t *testing.T, kv jetstream.KeyValue, filters ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := kv.ListKeysFiltered(ctx, filters...)
	if err != nil {
		t.Fatalf("ListKeysFiltered(%q): %v", filters, err)
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	return keys
}

// A GitOpsSync step lists its agent's registrations every time it runs. As a watch, each
// listing made and removed an ordered consumer on the server (a tenth of the CPU with 1,000
// parked runs); on a bucket with direct gets it is one direct get and creates no consumer.
// On a bucket read from its leader only (prflow-runs) it still lists with a watch, which the
// advisory count sees (so the count would see the direct path's consumers too).
func TestListKeysFilteredCreatesNoConsumer(t *testing.T) {
	c, b := setupBuckets(t)
	ctx := context.Background()
	for _, k := range []string{"eu.r1", "eu.r2", "us.r1"} {
		if _, err := b.Agents.PutString(ctx, k, "{}"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Runs.PutString(ctx, k, "{}"); err != nil {
			t.Fatal(err)
		}
	}
	created := consumersCreated(t, c)
	for i := 0; i < 3; i++ {
		if got := listFiltered(t, b.Agents, "eu.*"); !slices.Equal(got, []string{"eu.r1", "eu.r2"}) {
			t.Fatalf("agents eu.*: %q", got)
		}
	}
	if n := created(); n != 0 {
		t.Errorf("listing prflow-agents created %d consumers, want 0", n)
	}
	if got := listFiltered(t, b.Runs, "eu.*"); !slices.Equal(got, []string{"eu.r1", "eu.r2"}) {
		t.Fatalf("runs eu.*: %q", got)
	}
	if n := created(); n != 1 {
		t.Errorf("listing prflow-runs (leader reads, a watch) created %d consumers, want 1", n)
	}
}

// The direct listing answers what the watch-based one answers: deleted, purged and
// expired keys left out, keys put again after a delete kept, several filters, nothing
// matching, and more keys than the server sends in one batch (the watch lists them).
func TestListKeysFilteredDirectMatchesWatch(t *testing.T) {
	c, b := setupBuckets(t)
	ctx := context.Background()
	direct := b.Agents
	if direct.(*boundKV).direct == nil {
		t.Fatal("prflow-agents is not listed by direct get")
	}
	watch := BoundKV(direct, 0) // the same bucket, listed with a watch
	if watch.(*boundKV).direct != nil {
		t.Fatal("BoundKV lists by direct get")
	}
	put := func(k string) {
		t.Helper()
		if _, err := direct.PutString(ctx, k, "v"); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"a.1", "a.2", "a.3", "a.4", "b.1", "b.2", "c.1"} {
		put(k)
	}
	if err := direct.Delete(ctx, "a.2"); err != nil {
		t.Fatal(err)
	}
	if err := direct.Purge(ctx, "a.3"); err != nil {
		t.Fatal(err)
	}
	if err := direct.Delete(ctx, "a.4"); err != nil {
		t.Fatal(err)
	}
	put("a.4") // back after its delete
	cases := []struct {
		filters []string
		want    []string
	}{
		{[]string{"a.*"}, []string{"a.1", "a.4"}},
		{[]string{"a.*", "c.*"}, []string{"a.1", "a.4", "c.1"}},
		{[]string{">"}, []string{"a.1", "a.4", "b.1", "b.2", "c.1"}},
		{[]string{"b.2"}, []string{"b.2"}},
		{[]string{"z.*"}, nil},
		{[]string{"a.2"}, nil}, // only a delete marker
	}
	for _, tc := range cases {
		got, fromWatch := listFiltered(t, direct, tc.filters...), listFiltered(t, watch, tc.filters...)
		if !slices.Equal(got, tc.want) || !slices.Equal(fromWatch, tc.want) {
			t.Errorf("%q: direct %q, watch %q, want %q", tc.filters, got, fromWatch, tc.want)
		}
	}

	// More than one batch (the server sends at most 1,024 last messages per request).
	const many = 1500
	for i := 0; i < many; i++ {
		put(fmt.Sprintf("m.%05d", i))
	}
	if got := listFiltered(t, direct, "m.*"); len(got) != many || got[0] != "m.00000" || got[many-1] != fmt.Sprintf("m.%05d", many-1) {
		t.Errorf("m.*: %d keys (%q … ), want %d", len(got), got[:min(3, len(got))], many)
	}

	// A key that aged out (a bucket whose TTL writes markers).
	kv, err := c.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ttl", TTL: time.Second, LimitMarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ttl := boundDirect(ctx, c.JS, kv)
	if ttl.(*boundKV).direct == nil {
		t.Fatal("bucket ttl is not listed by direct get")
	}
	if _, err := ttl.PutString(ctx, "x.old", "v"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if _, err := ttl.PutString(ctx, "x.new", "v"); err != nil {
		t.Fatal(err)
	}
	if got := listFiltered(t, ttl, "x.*"); !slices.Equal(got, []string{"x.new"}) {
		t.Errorf("ttl x.*: %q, want the unexpired key only", got)
	}
}

// Listings made while writers add keys see every key written before they started, and only
// keys of the bucket (nothing of a listing made at the same time on the same connection).
func TestListKeysFilteredConcurrent(t *testing.T) {
	_, b := setupBuckets(t)
	ctx := context.Background()
	var written atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := b.Agents.PutString(ctx, fmt.Sprintf("w%d.%05d", w, i), "v"); err != nil {
					t.Error(err)
					return
				}
				written.Add(1)
			}
		}()
	}
	var lists sync.WaitGroup
	for l := 0; l < 4; l++ {
		lists.Add(1)
		go func() {
			defer lists.Done()
			for i := 0; i < 10; i++ {
				before := written.Load()
				got := listFiltered(t, b.Agents, "w0.*", "w1.*")
				if int64(len(got)) < before {
					t.Errorf("listing saw %d keys, %d were written before it started", len(got), before)
				}
				for _, k := range got {
					if k[0] != 'w' {
						t.Errorf("listing returned %q", k)
					}
				}
				if len(got) >= 900 {
					return // near the batch limit: the rest would list by watch
				}
			}
		}()
	}
	lists.Wait()
	close(stop)
	wg.Wait()
}

// A direct get nobody answers (a user whose NATS permissions deny the batched request: the
// server drops it and tells only the connection's error handler) costs one attempt; the
// listing is then done by watch, and later listings go straight to the watch.
func TestListKeysFilteredFallsBackWhenDirectGetUnanswered(t *testing.T) {
	c, b := setupBuckets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, k := range []string{"eu.r1", "eu.r2", "us.r1"} {
		if _, err := b.Agents.PutString(ctx, k, "{}"); err != nil {
			t.Fatal(err)
		}
	}
	bk := &boundKV{KeyValue: b.Agents.(*boundKV).KeyValue, attempt: 500 * time.Millisecond,
		direct: &directList{nc: c.NC, api: "$JS.API.DIRECT.GET.NOBODY_ANSWERS", prefix: "$KV.prflow-agents."}}
	// Something takes the request and never answers, so no "no responders" status comes back.
	sink, err := c.NC.Subscribe("$JS.API.DIRECT.GET.NOBODY_ANSWERS", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sink.Unsubscribe() }()
	created := consumersCreated(t, c)
	for i := 0; i < 2; i++ {
		l, err := bk.ListKeysFiltered(ctx, "eu.*")
		if err != nil {
			t.Fatalf("listing %d: %v", i, err)
		}
		var got []string
		for k := range l.Keys() {
			got = append(got, k)
		}
		if !slices.Equal(got, []string{"eu.r1", "eu.r2"}) {
			t.Fatalf("listing %d: %q", i, got)
		}
	}
	if !bk.direct.off.Load() {
		t.Fatal("the unanswered direct get was not turned off")
	}
	if n := created(); n != 2 {
		t.Errorf("%d consumers created, want 2 (both listings by watch)", n)
	}
}
