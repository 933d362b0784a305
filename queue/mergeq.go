package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketMergeQueue holds the merge queues: one FIFO per repo+branch, so that a merge that
// cannot go yet parks (holding no worker) instead of waiting for the branch inside a worker.
//
//	line.<line>            the FIFO: entries in order of joining; entries[0] is the head
//	turn.<line>.<entry>    written when that entry becomes the head: its parked step wakes on it
//	run.<run>.<line>       the lines a run joined, so its entries go when the run fails or is cancelled
//
// The bucket has no per-key TTL: a line outlives the leases of its members. Keys not written
// for MergeQueueMaxAge go (old turn keys, lines nobody merged to in a day); a line with
// members is rewritten at least every lineTouch by Join.
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

func (q *MergeQueue) read(ctx context.Context, line string) (*mergeLine, uint64, error) {
	e, err := q.KV.Get(ctx, lineKV(line))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &mergeLine{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("merge queue %s: read: %w", line, err)
	}
	var l mergeLine
	if err := json.Unmarshal(e.Value(), &l); err != nil {
		return nil, 0, fmt.Errorf("merge queue %s: unreadable line (revision %d): %w", line, e.Revision(), err)
	}
	return &l, e.Revision(), nil
}

// write stores l if the line is still at revision rev (0: absent). ok is false when someone
// else changed it first.
func (q *MergeQueue) write(ctx context.Context, line string, l *mergeLine, rev uint64) (bool, error) {
	var err error
	switch {
	case len(l.Entries) == 0 && rev == 0:
		return true, nil
	case len(l.Entries) == 0:
		err = q.KV.Delete(ctx, lineKV(line), jetstream.LastRevision(rev))
	default:
		l.Touched = time.Now()
		data, _ := json.Marshal(l)
		if rev == 0 {
			_, err = q.KV.Create(ctx, lineKV(line), data)
		} else {
			_, err = q.KV.Update(ctx, lineKV(line), data, rev)
		}
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("merge queue %s: write: %w", line, err)
	}
	return true, nil
}

func indexOf(l *mergeLine, id string) int {
	for i, e := range l.Entries {
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
func (q *MergeQueue) Join(ctx context.Context, line, id string) (*Place, error) {
	if line == "" || id == "" {
		return nil, errors.New("merge queue: line and entry id are required")
	}
	indexed := false
	for range 100 {
		l, rev, err := q.read(ctx, line)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		changed := now.Sub(l.Touched) > lineTouch
		pos := indexOf(l, id)
		if pos < 0 {
			if !indexed {
				// Recorded first, so a run that ends while this Join is under way finds the line.
				if _, err := q.KV.Put(ctx, runKey(runOf(id), line), []byte(line)); err != nil {
					return nil, fmt.Errorf("merge queue %s: record run: %w", line, err)
				}
				indexed = true
			}
			l.Entries = append(l.Entries, QueueEntry{ID: id, At: now})
			pos, changed = len(l.Entries)-1, true
		}
		for pos > 0 {
			ok, err := q.alive(ctx, line, l.Entries[0], now)
			if err != nil {
				return nil, err
			}
			if ok {
				break
			}
			l.Entries, pos, changed = l.Entries[1:], pos-1, true
		}
		promoted := ""
		if l.Entries[0].Head.IsZero() {
			l.Entries[0].Head, promoted, changed = now, l.Entries[0].ID, true
		}
		if changed {
			ok, err := q.write(ctx, line, l, rev)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
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
func (q *MergeQueue) Leave(ctx context.Context, line, id string, lease *Lease) error {
	if lease != nil {
		_ = lease.Release(ctx)
	}
	_, err := q.remove(ctx, line, func(e QueueEntry) bool { return e.ID == id })
	return err
}

// remove drops the entries drop matches and wakes a new head; it reports how many it dropped.
func (q *MergeQueue) remove(ctx context.Context, line string, drop func(QueueEntry) bool) (int, error) {
	for range 100 {
		l, rev, err := q.read(ctx, line)
		if err != nil {
			return 0, err
		}
		head := ""
		if len(l.Entries) > 0 {
			head = l.Entries[0].ID
		}
		kept := l.Entries[:0:0]
		for _, e := range l.Entries {
			if !drop(e) {
				kept = append(kept, e)
			}
		}
		n := len(l.Entries) - len(kept)
		if n == 0 {
			return 0, nil
		}
		l.Entries = kept
		promoted := ""
		if len(kept) > 0 && kept[0].ID != head {
			kept[0].Head, promoted = time.Now(), kept[0].ID
		}
		ok, err := q.write(ctx, line, l, rev)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		if promoted != "" {
			q.signal(ctx, line, promoted)
		}
		return n, nil
	}
	return 0, fmt.Errorf("merge queue %s: too many concurrent updates", line)
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
		if err != nil {
			return total, err
		}
		// The run's lease on the line (if its holder died) is left to its TTL: only the holder
		// may release it, and alive() stops counting it once the entry is gone.
		total += n
		_ = q.KV.Purge(ctx, k)
	}
	return total, nil
}

// Entries returns line's entries in order (for status and tests).
func (q *MergeQueue) Entries(ctx context.Context, line string) ([]QueueEntry, error) {
	l, _, err := q.read(ctx, line)
	if err != nil {
		return nil, err
	}
	return l.Entries, nil
}
