package queue

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketMergeQueue holds the merge queues: one FIFO per repo+branch, so that a merge that
// cannot go yet parks (holding no worker) instead of waiting for the branch inside a worker.
//
//	q.<line>.<entry>       one waiting merge: joining creates it, leaving deletes it; the line
//	                       is these keys in order of joining (the stream sequence of the
//	                       create), and its head is the first
//	turn.<line>.<entry>    written when that entry becomes the head: its parked step wakes on it
//	run.<run>.<line>       the lines a run joined, so its entries go when the run fails or is cancelled
//	line.<line>            the whole line in one value, as earlier versions wrote it: moved to
//	                       q. keys by whoever reads the line next (see migrate)
//
// One key per entry means a join or leave writes only its own key, however long the line:
// the old single value was rewritten (O(q) bytes, CAS retries under contention) on every one.
//
// The bucket has no per-key TTL: an entry outlives the leases of its members. Keys not written
// for MergeQueueMaxAge go (old turn keys); a waiting entry is rewritten at least every
// lineTouch by its own (polling) Join.
const BucketMergeQueue = "prflow-mergeq"

// MergeQueueMaxAge is how long a merge-queue key lives without being written.
const MergeQueueMaxAge = 24 * time.Hour

const lineTouch = time.Hour

// MergeQueueWaitPrefix marks a parked step's wait key (steps.Wait.Keys) as a key of
// BucketMergeQueue rather than of the apps bucket. ':' cannot occur in a KV key, so no app
// key can look like one.
const MergeQueueWaitPrefix = "mergeq:"

// MergeQueueTurnFilter is the subject filter of the keys that wake parked merges.
const MergeQueueTurnFilter = "turn.>"

// OpenMergeQueue opens the merge-queue bucket, creating it (with the replicas of the locks
// bucket) when it does not exist yet, so that workers and controllers of any version of the
// topology can use it.
func OpenMergeQueue(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	return openOrCreate(ctx, js, mergeQueueBucketConfig)
}

func mergeQueueBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: BucketMergeQueue, History: 1, TTL: MergeQueueMaxAge, Storage: jetstream.FileStorage,
		Replicas: replicas, Description: "merge queues: one FIFO per repo+branch"}
}

// MergeQueue is a FIFO of merges per repo+branch kept in KV. Only the head merges, and it holds
// the line's lease (in the locks bucket, renewed while it works) for that time. A head whose
// holder died loses its place when its lease expired and it had Grace to start; whoever looks
// at the line next (normally the entry behind it, which polls) removes it and wakes the next.
type MergeQueue struct {
	KV     jetstream.KeyValue // BucketMergeQueue
	Leases *Leases            // the locks bucket
	// Grace is how long a new head may take to start (its parked step woken, its job
	// delivered) before it counts as gone; default LeaseTTL.
	Grace time.Duration
}

// QueueEntry is one merge in a line.
type QueueEntry struct {
	ID   string    `json:"id"`            // run/stage/step of the MergePR step
	At   time.Time `json:"at"`            // when it joined
	Head time.Time `json:"head,omitzero"` // when it became the head
}

// entryValue is the value of an entry's key. Order and Sub place it in its line: Order is
// the revision of the key's create (absent until the key is first rewritten, as the create
// cannot know its own revision), Sub orders entries moved from one old-format line value.
type entryValue struct {
	QueueEntry
	Order   uint64    `json:"order,omitzero"`
	Sub     int       `json:"sub,omitzero"`
	Touched time.Time `json:"touched,omitzero"`
}

// entry is one entry as read, with its key's revision.
type entry struct {
	entryValue
	key string
	rev uint64
}

func (e *entry) order() uint64 {
	if e.Order != 0 {
		return e.Order
	}
	return e.rev
}

// mergeLine is the old format: the whole line in one value at line.<line>.
type mergeLine struct {
	Entries []QueueEntry `json:"entries"`
	Touched time.Time    `json:"touched"`
}

// Place is where Join put an entry.
type Place struct {
	Line     string
	ID       string
	Position int    // 0: the head
	Lease    *Lease // the line's lease, held when Position is 0 (nil if someone else still has it)
	WakeKey  string // the key (in BucketMergeQueue) written when this entry becomes the head
}

// LineKey is the name of the line of a repo+branch (parts such as connector, repo, branch).
func LineKey(parts ...string) string { return LeaseKey(append([]string{"merge"}, parts...)...) }

func lineKV(line string) string { return "line." + line }

// entryKey is entry id's key in line; LeaseKey makes id one token, so "q.<line>.*" matches
// the entries of line and of no other line.
func entryKey(line, id string) string { return "q." + line + "." + LeaseKey(id) }

// TurnKey is the key written when entry id becomes the head of line.
func TurnKey(line, id string) string { return "turn." + line + "." + LeaseKey(id) }

func runKey(run, line string) string { return "run." + LeaseKey(run) + "." + line }

// runOf is the run id of an entry id (run/stage/step).
func runOf(id string) string {
	run, _, _ := strings.Cut(id, "/")
	return run
}

func (q *MergeQueue) grace() time.Duration {
	if q.Grace > 0 {
		return q.Grace
	}
	return LeaseTTL
}

// read returns line's entries in order (one watch of its keys). A line still in the old
// format is moved to entry keys first.
func (q *MergeQueue) read(ctx context.Context, line string) ([]*entry, error) {
	for range 10 {
		es, old, err := q.scan(ctx, line)
		if err != nil {
			return nil, err
		}
		if old == nil {
			return es, nil
		}
		if err := q.migrate(ctx, line, old); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("merge queue %s: the old-format line keeps changing while it is moved to entry keys", line)
}

// scan reads the entry keys of line and its old-format value, if any.
func (q *MergeQueue) scan(ctx context.Context, line string) ([]*entry, jetstream.KeyValueEntry, error) {
	w, err := q.KV.WatchFiltered(ctx, []string{"q." + line + ".*", lineKV(line)}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, nil, fmt.Errorf("merge queue %s: read: %w", line, err)
	}
	defer func() { _ = w.Stop() }()
	var es []*entry
	var old jetstream.KeyValueEntry
	for {
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("merge queue %s: read: %w", line, ctx.Err())
		case kve, ok := <-w.Updates():
			if !ok {
				return nil, nil, fmt.Errorf("merge queue %s: read: the watcher stopped", line)
			}
			if kve == nil {
				slices.SortStableFunc(es, func(a, b *entry) int {
					return cmp.Or(cmp.Compare(a.order(), b.order()), cmp.Compare(a.Sub, b.Sub))
				})
				return es, old, nil
			}
			if kve.Key() == lineKV(line) {
				old = kve
				continue
			}
			e := &entry{key: kve.Key(), rev: kve.Revision()}
			if err := json.Unmarshal(kve.Value(), &e.entryValue); err != nil || e.ID == "" {
				return nil, nil, fmt.Errorf("merge queue %s: unreadable entry %s (revision %d): %v", line, kve.Key(), kve.Revision(), err)
			}
			es = append(es, e)
		}
	}
}

// migrate moves an old-format line value (a controller or worker upgraded while merges
// wait) to one key per entry, keeping their order ahead of every entry created since (whose
// revisions are higher than the value's), and then deletes the value if nobody rewrote it
// meanwhile. Creating first and deleting last loses no entry if this process dies between.
func (q *MergeQueue) migrate(ctx context.Context, line string, old jetstream.KeyValueEntry) error {
	var l mergeLine
	if err := json.Unmarshal(old.Value(), &l); err != nil {
		return fmt.Errorf("merge queue %s: unreadable old-format line (revision %d): %w", line, old.Revision(), err)
	}
	now := time.Now()
	for i, qe := range l.Entries {
		if qe.ID == "" {
			continue
		}
		data, _ := json.Marshal(entryValue{QueueEntry: qe, Order: old.Revision(), Sub: i + 1, Touched: now})
		_, err := q.KV.Create(ctx, entryKey(line, qe.ID), data)
		if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("merge queue %s: move entry %s of the old-format line: %w", line, qe.ID, err)
		}
	}
	err := q.KV.Delete(ctx, lineKV(line), jetstream.LastRevision(old.Revision()))
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("merge queue %s: delete the old-format line: %w", line, err)
	}
	return nil
}

// rewrite stores e's value again (head mark, touch), keeping its place; ok is false when
// the key changed (or went) since it was read.
func (q *MergeQueue) rewrite(ctx context.Context, line string, e *entry) (bool, error) {
	e.Order, e.Touched = e.order(), time.Now()
	data, _ := json.Marshal(e.entryValue)
	rev, err := q.KV.Update(ctx, e.key, data, e.rev)
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("merge queue %s: write entry %s: %w", line, e.ID, err)
	}
	e.rev = rev
	return true, nil
}

// drop deletes e if its key is still at the revision read.
func (q *MergeQueue) drop(ctx context.Context, line string, e *entry) (bool, error) {
	err := q.KV.Delete(ctx, e.key, jetstream.LastRevision(e.rev))
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("merge queue %s: remove entry %s: %w", line, e.ID, err)
	}
	return true, nil
}

func indexOf(es []*entry, id string) int {
	for i, e := range es {
		if e.ID == id {
			return i
		}
	}
	return -1
}

// alive reports whether the head still holds its place: it holds the line's lease, or it
// became the head less than Grace ago (its job is on its way).
func (q *MergeQueue) alive(ctx context.Context, line string, head QueueEntry, now time.Time) (bool, error) {
	if !head.Head.IsZero() && now.Sub(head.Head) < q.grace() {
		return true, nil
	}
	e, err := q.Leases.KV.Get(ctx, line)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("merge queue %s: lease: %w", line, err)
	}
	var v leaseValue
	_ = json.Unmarshal(e.Value(), &v)
	// Held by someone else, the head cannot merge either; the next head waits for that lease.
	return v.Holder == head.ID, nil
}

// Join puts entry id at the end of line, or finds it where an earlier run of the same step put
// it (a redelivery or a woken park keeps its place). Heads that are gone are removed on the
// way. At the head, Join takes the line's lease for id; Place.Lease is nil when the lease is
// still held (the previous head is releasing it): the caller retries shortly.
//
// A new entry is one create of its own key (which also keeps two deliveries of the same step
// from joining twice); its place is the order of that create among the line's keys.
func (q *MergeQueue) Join(ctx context.Context, line, id string) (*Place, error) {
	if line == "" || id == "" {
		return nil, errors.New("merge queue: line and entry id are required")
	}
	indexed := false
retry:
	for range 100 {
		es, err := q.read(ctx, line)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		pos := indexOf(es, id)
		if pos < 0 {
			if !indexed {
				// Recorded first, so a run that ends while this Join is under way finds the line.
				if _, err := q.KV.Put(ctx, runKey(runOf(id), line), []byte(line)); err != nil {
					return nil, fmt.Errorf("merge queue %s: record run: %w", line, err)
				}
				indexed = true
			}
			v := entryValue{QueueEntry: QueueEntry{ID: id, At: now}, Touched: now}
			data, _ := json.Marshal(v)
			rev, err := q.KV.Create(ctx, entryKey(line, id), data)
			if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
				return nil, fmt.Errorf("merge queue %s: join %s: %w", line, id, err)
			}
			if err != nil || len(es) == 0 {
				// Another delivery created it, or it may be the head: read the line again
				// (entries created meanwhile may be ahead of it).
				continue
			}
			// Behind the entries read, and perhaps behind others that joined since (its
			// Position is then low until its next Join): not the head either way.
			es, pos = append(es, &entry{entryValue: v, key: entryKey(line, id), rev: rev}), len(es)
		}
		if now.Sub(es[pos].Touched) > lineTouch {
			// A long wait: rewritten so that the bucket's max age does not take it.
			if ok, err := q.rewrite(ctx, line, es[pos]); err != nil || !ok {
				if err != nil {
					return nil, err
				}
				continue
			}
		}
		for pos > 0 {
			ok, err := q.alive(ctx, line, es[0].QueueEntry, now)
			if err != nil {
				return nil, err
			}
			if ok {
				break
			}
			if ok, err := q.drop(ctx, line, es[0]); err != nil || !ok {
				if err != nil {
					return nil, err
				}
				continue retry
			}
			es, pos = es[1:], pos-1
		}
		promoted := ""
		if es[0].Head.IsZero() {
			es[0].Head = now
			if ok, err := q.rewrite(ctx, line, es[0]); err != nil || !ok {
				if err != nil {
					return nil, err
				}
				continue
			}
			promoted = es[0].ID
		}
		if promoted != "" && promoted != id {
			q.signal(ctx, line, promoted)
		}
		p := &Place{Line: line, ID: id, Position: pos, WakeKey: TurnKey(line, id)}
		if pos == 0 {
			if q.heldLive(ctx, line, id, now) {
				// Another delivery of this same step holds it and is alive (a job redelivered
				// while its first delivery still runs, as after a server restart): not twice.
				return p, nil
			}
			ls, err := q.Leases.TryAcquire(ctx, line, id)
			switch {
			case err == nil:
				p.Lease = ls
			case !errors.Is(err, ErrLeaseHeld):
				return nil, err
			}
		}
		return p, nil
	}
	return nil, fmt.Errorf("merge queue %s: too many concurrent updates", line)
}

// heldLive reports whether id's lease on line was renewed recently, i.e. another run of the
// same step holds it and is alive. A holder that died stops renewing; its redelivered job
// takes the lease over once it is stale, without waiting for the whole TTL.
func (q *MergeQueue) heldLive(ctx context.Context, line, id string, now time.Time) bool {
	e, err := q.Leases.KV.Get(ctx, line)
	if err != nil {
		return false
	}
	var v leaseValue
	if json.Unmarshal(e.Value(), &v) != nil || v.Holder != id {
		return false
	}
	renew := q.Leases.Renew
	if renew <= 0 {
		renew = LeaseTTL / 3
	}
	return now.Sub(v.At) < renew+renew/2
}

// signal writes the turn key of the new head, which wakes its parked step.
func (q *MergeQueue) signal(ctx context.Context, line, id string) {
	_, _ = q.KV.Put(ctx, TurnKey(line, id), []byte(time.Now().UTC().Format(time.RFC3339Nano)))
}

// Leave releases lease (if any) and removes entry id from line; when it was the head, the next
// entry becomes the head and is woken at once. Removing an entry that is not there is fine.
// Only the entry's own key is deleted; the line is read only when the head leaves.
func (q *MergeQueue) Leave(ctx context.Context, line, id string, lease *Lease) error {
	if lease != nil {
		_ = lease.Release(ctx)
	}
	migrated := false
	for range 100 {
		kve, err := q.KV.Get(ctx, entryKey(line, id))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if migrated {
				return nil
			}
			// Not there, or still inside an old-format line value: reading the line moves it.
			if _, err := q.read(ctx, line); err != nil {
				return err
			}
			migrated = true
			continue
		}
		if err != nil {
			return fmt.Errorf("merge queue %s: leave %s: %w", line, id, err)
		}
		e := &entry{key: kve.Key(), rev: kve.Revision()}
		if err := json.Unmarshal(kve.Value(), &e.entryValue); err != nil {
			return fmt.Errorf("merge queue %s: unreadable entry %s (revision %d): %w", line, kve.Key(), kve.Revision(), err)
		}
		ok, err := q.drop(ctx, line, e)
		if err != nil {
			return err
		}
		if !ok {
			continue // rewritten meanwhile (it became the head): read it again
		}
		if !e.Head.IsZero() {
			return q.promote(ctx, line)
		}
		return nil
	}
	return fmt.Errorf("merge queue %s: too many concurrent updates", line)
}

// promote makes the first entry of line the head and wakes it, unless it is already.
func (q *MergeQueue) promote(ctx context.Context, line string) error {
	for range 100 {
		es, err := q.read(ctx, line)
		if err != nil {
			return err
		}
		if len(es) == 0 || !es[0].Head.IsZero() {
			return nil
		}
		es[0].Head = time.Now()
		ok, err := q.rewrite(ctx, line, es[0])
		if err != nil {
			return err
		}
		if ok {
			q.signal(ctx, line, es[0].ID)
			return nil
		}
	}
	return fmt.Errorf("merge queue %s: too many concurrent updates", line)
}

// remove drops the entries drop matches and wakes a new head; it reports how many it dropped.
func (q *MergeQueue) remove(ctx context.Context, line string, match func(QueueEntry) bool) (int, error) {
	n, head := 0, false
	for range 100 {
		es, err := q.read(ctx, line)
		if err != nil {
			return n, err
		}
		again := false
		for i, e := range es {
			if !match(e.QueueEntry) {
				continue
			}
			ok, err := q.drop(ctx, line, e)
			if err != nil {
				return n, err
			}
			if !ok {
				again = true // rewritten meanwhile: read the line again
				continue
			}
			n++
			head = head || i == 0 || !e.Head.IsZero()
		}
		if again {
			continue
		}
		if head {
			return n, q.promote(ctx, line)
		}
		return n, nil
	}
	return n, fmt.Errorf("merge queue %s: too many concurrent updates", line)
}

// RemoveRun takes every entry of run out of every line it joined (the run failed or was
// cancelled), waking the next merge where one of them was the head. It returns how many
// entries it removed.
func (q *MergeQueue) RemoveRun(ctx context.Context, run string) (int, error) {
	lister, err := q.KV.ListKeysFiltered(ctx, "run."+LeaseKey(run)+".>")
	if err != nil {
		return 0, fmt.Errorf("merge queue: lines of run %s: %w", run, err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	total := 0
	prefix := run + "/"
	for _, k := range keys {
		line := strings.TrimPrefix(k, "run."+LeaseKey(run)+".")
		n, err := q.remove(ctx, line, func(e QueueEntry) bool { return strings.HasPrefix(e.ID, prefix) })
		total += n
		if err != nil {
			return total, err
		}
		// The run's lease on the line (if its holder died) is left to its TTL: only the holder
		// may release it, and alive() stops counting it once the entry is gone.
		_ = q.KV.Purge(ctx, k)
	}
	return total, nil
}

// Entries returns line's entries in order (for status and tests).
func (q *MergeQueue) Entries(ctx context.Context, line string) ([]QueueEntry, error) {
	es, err := q.read(ctx, line)
	if err != nil {
		return nil, err
	}
	out := make([]QueueEntry, len(es))
	for i, e := range es {
		out[i] = e.QueueEntry
	}
	return out, nil
}
