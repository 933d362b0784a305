package queue

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KVAttempt bounds one request of a KV operation made through a bucket from OpenBuckets or
// OpenMergeQueue.
//
// nats.go waits for a JetStream API reply until the caller's deadline. A request that reaches
// a stream while its leader is being elected (a node died) gets no reply at all, so a step
// that reads a bucket under its own three-minute context used to hang for three minutes on
// one lost request. Reads are asked again, each time bounded, until ctx ends; a write gets one
// bounded attempt and its error, because asking again could apply it twice (a Create or
// Update whose reply was lost fails the second time for the wrong reason).
const KVAttempt = 5 * time.Second

// kvRetryPause separates the attempts of a read, so a bucket without a leader is not
// hammered while the election runs.
const kvRetryPause = 100 * time.Millisecond

// BoundKV wraps kv so that every request is bounded by attempt (KVAttempt when 0) and reads
// are retried until ctx's deadline. Watches are not bounded: they are meant to live long.
func BoundKV(kv jetstream.KeyValue, attempt time.Duration) jetstream.KeyValue {
	if attempt <= 0 {
		attempt = KVAttempt
	}
	if b, ok := kv.(*boundKV); ok {
		kv = b.KeyValue
	}
	return &boundKV{KeyValue: kv, attempt: attempt}
}

type boundKV struct {
	jetstream.KeyValue
	attempt time.Duration
	direct  *directList // lists keys by direct get when set (kvlist.go)
}

// boundDirect is BoundKV whose filtered key listings are direct gets where the bucket allows
// them (directLister).
func boundDirect(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue) jetstream.KeyValue {
	b := BoundKV(kv, 0).(*boundKV)
	b.direct = directLister(ctx, js, b.KeyValue)
	return b
}

// lostReply reports whether err says that a request got no answer in time (or found no
// responder for a moment), while the caller's own ctx still lives.
func lostReply(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, errListUnfinished)
}

// read runs op with a bounded context until it answers, fails for another reason than a
// lost reply, or ctx ends. A ctx without a deadline gets one attempt, as nats.go gives it:
// a caller that set no limit must not wait for ever on a cluster that is down.
func read[T any](ctx context.Context, attempt time.Duration, op func(context.Context) (T, error)) (T, error) {
	if _, ok := ctx.Deadline(); !ok {
		return once(ctx, attempt, op)
	}
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		v, err := op(actx)
		cancel()
		if err == nil || !lostReply(ctx, err) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(kvRetryPause):
		}
	}
}

// once runs op once with a bounded context: every write, and a read whose caller set no deadline.
func once[T any](ctx context.Context, attempt time.Duration, op func(context.Context) (T, error)) (T, error) {
	actx, cancel := context.WithTimeout(ctx, attempt)
	defer cancel()
	return op(actx)
}

func (b *boundKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	return read(ctx, b.attempt, func(ctx context.Context) (jetstream.KeyValueEntry, error) { return b.KeyValue.Get(ctx, key) })
}

func (b *boundKV) GetRevision(ctx context.Context, key string, revision uint64) (jetstream.KeyValueEntry, error) {
	return read(ctx, b.attempt, func(ctx context.Context) (jetstream.KeyValueEntry, error) {
		return b.KeyValue.GetRevision(ctx, key, revision)
	})
}

func (b *boundKV) History(ctx context.Context, key string, opts ...jetstream.WatchOpt) ([]jetstream.KeyValueEntry, error) {
	return read(ctx, b.attempt, func(ctx context.Context) ([]jetstream.KeyValueEntry, error) {
		return b.KeyValue.History(ctx, key, opts...)
	})
}

func (b *boundKV) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	return read(ctx, b.attempt, func(ctx context.Context) (jetstream.KeyValueStatus, error) { return b.KeyValue.Status(ctx) })
}

func (b *boundKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return once(ctx, b.attempt, func(ctx context.Context) (uint64, error) { return b.KeyValue.Put(ctx, key, value) })
}

func (b *boundKV) PutString(ctx context.Context, key string, value string) (uint64, error) {
	return once(ctx, b.attempt, func(ctx context.Context) (uint64, error) { return b.KeyValue.PutString(ctx, key, value) })
}

func (b *boundKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	return once(ctx, b.attempt, func(ctx context.Context) (uint64, error) { return b.KeyValue.Create(ctx, key, value, opts...) })
}

func (b *boundKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	return once(ctx, b.attempt, func(ctx context.Context) (uint64, error) {
		return b.KeyValue.Update(ctx, key, value, revision)
	})
}

func (b *boundKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	_, err := once(ctx, b.attempt, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, b.KeyValue.Delete(ctx, key, opts...)
	})
	return err
}

func (b *boundKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	_, err := once(ctx, b.attempt, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, b.KeyValue.Purge(ctx, key, opts...)
	})
	return err
}

// errListUnfinished: a key listing's watcher did not deliver its end-of-initial-values
// marker within the attempt.
var errListUnfinished = errors.New("key listing did not finish")

// keys lists the keys a watch started by watch delivers before its end-of-initial-values
// marker, sorted and without repeats. nats.go's own listers close their channel when their
// ctx ends, so a listing cut short looks complete, and Keys waits without any bound for a
// watcher whose consumer went away with a node; a listing here either finishes or is asked
// again.
func (b *boundKV) keys(ctx context.Context, watch func(context.Context) (jetstream.KeyWatcher, error)) ([]string, error) {
	return read(ctx, b.attempt, func(ctx context.Context) ([]string, error) {
		w, err := watch(ctx)
		if err != nil {
			return nil, err
		}
		defer func() { _ = w.Stop() }()
		var keys []string
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					return nil, errListUnfinished // stopped before its marker
				}
				if e == nil {
					slices.Sort(keys)
					return slices.Compact(keys), nil
				}
				keys = append(keys, e.Key())
			case <-ctx.Done():
				return nil, errListUnfinished
			}
		}
	})
}

func (b *boundKV) Keys(ctx context.Context, opts ...jetstream.WatchOpt) ([]string, error) {
	keys, err := b.keys(ctx, func(ctx context.Context) (jetstream.KeyWatcher, error) {
		return b.KeyValue.WatchAll(ctx, append(opts, jetstream.IgnoreDeletes(), jetstream.MetaOnly())...)
	})
	if err == nil && len(keys) == 0 {
		return nil, jetstream.ErrNoKeysFound
	}
	return keys, err
}

func (b *boundKV) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	keys, err := b.keys(ctx, func(ctx context.Context) (jetstream.KeyWatcher, error) {
		return b.KeyValue.WatchAll(ctx, append(opts, jetstream.IgnoreDeletes(), jetstream.MetaOnly())...)
	})
	if err != nil {
		return nil, err
	}
	return listed(keys), nil
}

func (b *boundKV) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	if b.direct != nil && !b.direct.off.Load() {
		keys, err := read(ctx, b.attempt, func(ctx context.Context) ([]string, error) { return b.direct.keys(ctx, filters) })
		if !errors.Is(err, errDirectIncomplete) {
			if err != nil {
				return nil, err
			}
			return listed(keys), nil
		}
	}
	keys, err := b.keys(ctx, func(ctx context.Context) (jetstream.KeyWatcher, error) {
		// A copy each time: nats.go rewrites the slice it is given into subjects.
		return b.KeyValue.WatchFiltered(ctx, slices.Clone(filters), jetstream.IgnoreDeletes(), jetstream.MetaOnly())
	})
	if err != nil {
		return nil, err
	}
	return listed(keys), nil
}

// keyList is a finished listing handed out as a KeyLister.
type keyList chan string

func listed(keys []string) keyList {
	ch := make(chan string, len(keys))
	for _, k := range keys {
		ch <- k
	}
	close(ch)
	return ch
}

func (l keyList) Keys() <-chan string { return l }
func (l keyList) Stop() error         { return nil }
