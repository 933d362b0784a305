package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// lossyAPI stands between a client and the JetStream API the way a stream leader election
// does: the client's API requests go to a prefix of their own and are forwarded to $JS.API, except
// the first lose requests that match (no reply at all, as for a request that reached a
// stream without a leader).
type lossyAPI struct {
	match func(api string) bool // the API subject after $JS.API.
	lose  int

	mu   sync.Mutex
	seen map[string]int // requests per API subject
	lost int
}

func (l *lossyAPI) decide(api string) (drop bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[api]++
	if l.match != nil && l.match(api) && l.lost < l.lose {
		l.lost++
		return true
	}
	return false
}

func (l *lossyAPI) count(api string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[api]
}

var lossyPrefixes atomic.Int64

// serveLossy forwards a JetStream client's requests under a prefix of its own to c's
// server, losing those l picks, and returns that client.
func serveLossy(t *testing.T, c *Conn, l *lossyAPI) jetstream.JetStream {
	t.Helper()
	if l.seen == nil {
		l.seen = map[string]int{}
	}
	prefix := fmt.Sprintf("lossy%d", lossyPrefixes.Add(1))
	sub, err := c.NC.Subscribe(prefix+".>", func(m *nats.Msg) {
		api := strings.TrimPrefix(m.Subject, prefix+".")
		if l.decide(api) {
			return
		}
		to := "$JS.API." + api
		if strings.HasPrefix(api, "$KV.") { // a KV write under an API prefix: a plain publish
			to = api
		}
		rep, err := c.NC.RequestMsg(&nats.Msg{Subject: to, Data: m.Data, Header: m.Header}, 5*time.Second)
		if err != nil {
			return
		}
		_ = m.RespondMsg(&nats.Msg{Data: rep.Data, Header: rep.Header})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	js, err := jetstream.NewWithAPIPrefix(c.NC, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// lossyKV opens bucket through a lossy API on c's server.
func lossyKV(t *testing.T, c *Conn, bucket string, l *lossyAPI) jetstream.KeyValue {
	t.Helper()
	l.seen = map[string]int{}
	js := serveLossy(t, c, l)
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func kvBucket(t *testing.T, c *Conn, name string, keys ...string) {
	t.Helper()
	kv, err := c.JS.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: name})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := kv.PutString(context.Background(), k, "v-"+k); err != nil {
			t.Fatal(err)
		}
	}
}

// The first two reads of a key get no reply. A caller with a long deadline (a step's) used to
// wait for all of it; bounded, the third attempt answers.
func TestBoundKVRetriesLostReads(t *testing.T) {
	c := open(t)
	kvBucket(t, c, "b", "a", "b", "c")
	get := func(api string) bool {
		return strings.HasPrefix(api, "STREAM.MSG.GET.") || strings.HasPrefix(api, "DIRECT.GET.")
	}
	watch := func(api string) bool { return strings.HasPrefix(api, "CONSUMER.CREATE.") }
	cases := []struct {
		name string
		read func(ctx context.Context, kv jetstream.KeyValue) (string, error)
		api  func(string) bool
	}{
		{"Get", func(ctx context.Context, kv jetstream.KeyValue) (string, error) {
			e, err := kv.Get(ctx, "b")
			if err != nil {
				return "", err
			}
			return string(e.Value()), nil
		}, get},
		{"ListKeys", func(ctx context.Context, kv jetstream.KeyValue) (string, error) {
			return sortedKeys(kv.ListKeys(ctx))
		}, watch},
		{"ListKeysFiltered", func(ctx context.Context, kv jetstream.KeyValue) (string, error) {
			return sortedKeys(kv.ListKeysFiltered(ctx, "a", "c"))
		}, watch},
		{"Keys", func(ctx context.Context, kv jetstream.KeyValue) (string, error) {
			keys, err := kv.Keys(ctx)
			return strings.Join(keys, ","), err
		}, watch},
	}
	want := map[string]string{"Get": "v-b", "ListKeys": "a,b,c", "ListKeysFiltered": "a,c", "Keys": "a,b,c"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // reads only, each through its own lossy API prefix; each waits out a deadline
			raw := lossyKV(t, c, "b", &lossyAPI{match: tc.api, lose: 2})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			// Unbounded, the lost request costs the whole deadline (and a listing cut by it
			// comes back short or not at all).
			if got, err := tc.read(ctx, raw); err == nil && got == want[tc.name] {
				t.Fatalf("raw %s answered %q through a lost request: the test loses nothing", tc.name, got)
			}
			kv := BoundKV(lossyKV(t, c, "b", &lossyAPI{match: tc.api, lose: 2}), 200*time.Millisecond)
			ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
			defer cancel2()
			got, err := tc.read(ctx2, kv)
			if err != nil || got != want[tc.name] {
				t.Fatalf("bounded %s = %q, %v; want %q", tc.name, got, err, want[tc.name])
			}
		})
	}
}

// A read whose caller set no deadline gets one bounded attempt, not retries for ever.
func TestBoundKVNoDeadlineOneAttempt(t *testing.T) {
	c := open(t)
	kvBucket(t, c, "b", "a")
	l := &lossyAPI{match: func(api string) bool { return strings.HasPrefix(api, "DIRECT.GET.") }, lose: 1 << 30}
	kv := BoundKV(lossyKV(t, c, "b", l), 200*time.Millisecond)
	_, err := kv.Get(context.Background(), "a")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get with no deadline through a dead API: %v, want a deadline error", err)
	}
	if n := l.count("DIRECT.GET.KV_b.$KV.b.a"); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
}

// blockingKV stands for a bucket whose replies are lost: every call waits for its ctx.
type blockingKV struct {
	jetstream.KeyValue
	mu    sync.Mutex
	calls int
}

func (b *blockingKV) Create(ctx context.Context, _ string, _ []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	b.mu.Lock()
	b.calls++
	b.mu.Unlock()
	<-ctx.Done()
	return 0, ctx.Err()
}

// A write is asked once, bounded: asking again after a lost reply could apply it twice (a
// Create would then fail with "key exists" for the wrong reason).
func TestBoundKVWriteOneAttempt(t *testing.T) {
	stub := &blockingKV{}
	kv := BoundKV(stub, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := kv.Create(ctx, "k", []byte("1"))
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("Create through lost replies: %v (caller ctx: %v); want the attempt's deadline", err, ctx.Err())
	}
	if stub.calls != 1 {
		t.Fatalf("Create asked %d times, want 1", stub.calls)
	}
}

// Setup's creates are asked again when their reply is lost (a cluster electing its meta
// leader answers nothing): before, one lost create cost the whole of Setup's context and
// `prflow server --replicas 3` exited.
func TestSetupRetriesLostCreates(t *testing.T) {
	c := open(t)
	defer func(d time.Duration) { setupAttempt = d }(setupAttempt)
	setupAttempt = 200 * time.Millisecond
	l := &lossyAPI{match: func(api string) bool {
		return api == "STREAM.CREATE."+StreamEvents || api == "STREAM.CREATE.KV_"+BucketRuns
	}, lose: 2}
	js := serveLossy(t, c, l)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := Setup(ctx, js, 1); err != nil {
		t.Fatalf("Setup through lost replies: %v", err)
	}
	if l.lost != 2 {
		t.Fatalf("%d creates lost, want 2 (the test lost nothing)", l.lost)
	}
	if _, err := OpenBuckets(ctx, c.JS); err != nil {
		t.Fatal(err)
	}
}

// sortedKeys reads a key lister to its end: its keys sorted, comma-separated.
func sortedKeys(l jetstream.KeyLister, err error) (string, error) {
	if err != nil {
		return "", err
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ","), nil
}
