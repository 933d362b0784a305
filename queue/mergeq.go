package queue

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BucketMergeQueue holds the merge queues: one FIFO per repo+branch, so that a merge that
// cannot go yet parks (holding no worker) instead of waiting for the branch inside a worker.
//
//	q.<line>.<entry>       one waiting merge: joining creates it, leaving deletes it; the line
//	                       is these keys in order of their create's stream sequence, and its
//	                       head is the first
//	turn.<line>.<entry>    written when that entry becomes the head: its parked step wakes on it
//	run.<run>.<line>       the lines a run joined, so its entries go when the run fails or is cancelled
//	line.<line>            the whole line in one value, as earlier versions wrote it: moved to
//	                       q. keys by the first process that uses the line (see migrate)
//
// One key per entry means a join or leave writes only its own key, however long the line.
// Each process reads a line from an in-memory view kept by one watch of its keys (lineView),
// so neither lists the line's keys.
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
	kv, err := openOrCreate(ctx, js, mergeQueueBucketConfig)
	if err != nil {
		return nil, err
	}
	return connKV{KeyValue: kv, nc: js.Conn()}, nil
}

// connKV is the merge-queue bucket with the connection it was opened on: a MergeQueue's line
// views read their line afresh when it reconnects.
type connKV struct {
	jetstream.KeyValue
	nc *nats.Conn
}

func mergeQueueBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: BucketMergeQueue, History: 1, TTL: MergeQueueMaxAge, Storage: jetstream.FileStorage,
		Replicas: replicas, Description: "merge queues: one FIFO per repo+branch"}
}

// MergeQueue is a FIFO of merges per repo+branch kept in KV. Only the head merges, and it holds
// the line's lease (in the locks bucket, renewed while it works) for that time. A head whose
// holder died loses its place when its lease expired and it had Grace to start; whoever looks
// at the line next (normally the entry behind it, which polls) removes it and wakes the next.
//
// Each line in use has one view in this process (see lineView), shared by every caller of
// this MergeQueue; Close stops their watches (an unused view stops its own after a while).
type MergeQueue struct {
	KV     jetstream.KeyValue // BucketMergeQueue
	Leases *Leases            // the locks bucket
	// Grace is how long a new head may take to start (its parked step woken, its job
	// delivered) before it counts as gone; default LeaseTTL.
	Grace time.Duration
	// Log takes the warnings of the line views (an entry key that is not an entry); nil:
	// slog.Default().
	Log *slog.Logger

	// catchUp, resyncEvery and idleAfter override viewCatchUp, viewResync and viewIdle (tests).
	catchUp, resyncEvery, idleAfter time.Duration

	mu    sync.Mutex
	views map[string]*lineView
}

const (
	// viewCatchUp is how long a view may take to show a write before it is read afresh.
	viewCatchUp = 5 * time.Second
	// viewResync is how often a view is read afresh anyway (a safety net: the watch is an
	// ordered consumer, which already restarts itself where it stopped after a gap).
	viewResync = 5 * time.Minute
	// viewIdle is how long a view nobody uses keeps its watch.
	viewIdle = 10 * time.Minute
	// maxEntryKey bounds an entry's key, well inside NATS's 4 KiB control line.
	maxEntryKey = 1024
)

// QueueEntry is one merge in a line.
type QueueEntry struct {
	ID   string    `json:"id"`            // run/stage/step of the MergePR step
	At   time.Time `json:"at"`            // when it joined
	Head time.Time `json:"head,omitzero"` // when it became the head
}

// entryValue is the value of an entry's key. Order and Sub place it in its line: Order is the
// revision of the key's create (written from the first rewrite on, as a create cannot know its
// own revision), Sub orders the entries moved from one old-format line value.
type entryValue struct {
	QueueEntry
	Order   uint64    `json:"order,omitzero"`
	Sub     int       `json:"sub,omitzero"`
	Touched time.Time `json:"touched,omitzero"`
}

// entry is one entry as the view holds it, with its key's revision.
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

// fenceKey is written to learn when a view has seen everything written before (see fence).
func fenceKey(line string) string { return "fence." + line }

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

// checkLine rejects a line that is not a LineKey: it must be dot-separated tokens of
// letters, digits, '-' and '_', or the view's key filter would match other lines (or none).
func checkLine(line string) error {
	if line == "" {
		return errors.New("merge queue: line and entry id are required")
	}
	for i, tok := range strings.Split(line, ".") {
		if tok == "" {
			return fmt.Errorf("merge queue: line %.80q has an empty part (#%d): make it with LineKey", line, i+1)
		}
		if j := strings.IndexFunc(tok, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
		}); j >= 0 {
			return fmt.Errorf("merge queue: line %.80q has %q in part #%d: make it with LineKey", line, tok[j:j+1], i+1)
		}
	}
	return nil
}

func checkEntry(line, id string) error {
	if err := checkLine(line); err != nil {
		return err
	}
	if id == "" {
		return errors.New("merge queue: line and entry id are required")
	}
	if n := len(entryKey(line, id)); n > maxEntryKey {
		return fmt.Errorf("merge queue: the key of entry %.40q in line %.60q is %d bytes, more than %d", id, line, n, maxEntryKey)
	}
	return nil
}

func (q *MergeQueue) grace() time.Duration {
	if q.Grace > 0 {
		return q.Grace
	}
	return LeaseTTL
}

// conn is the connection of q.KV when OpenMergeQueue opened it, else nil.
func (q *MergeQueue) conn() *nats.Conn {
	if c, ok := q.KV.(connKV); ok {
		return c.nc
	}
	return nil
}

func (q *MergeQueue) log() *slog.Logger {
	if q.Log != nil {
		return q.Log
	}
	return slog.Default()
}

// conflict reports a write refused because the key is not at the revision given.
func conflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound)
}

// until is a condition a view must meet before it is read: that it shows a write.
type until func(v *lineView) bool

// seqAtLeast holds once the view applied the stream's messages up to rev; as the watch
// delivers in stream order, it then knows every entry created before.
func seqAtLeast(rev uint64) until { return func(v *lineView) bool { return v.seq >= rev } }

// moved holds once the view no longer shows key at revision rev (it applied a rewrite or the
// delete, and so everything written before them).
func moved(key string, rev uint64) until {
	return func(v *lineView) bool { e := v.entries.byKey[key]; return e == nil || e.rev != rev }
}

func gone(key string) until { return func(v *lineView) bool { return v.entries.byKey[key] == nil } }

func all(us ...until) until {
	return func(v *lineView) bool {
		for _, u := range us {
			if u != nil && !u(v) {
				return false
			}
		}
		return true
	}
}

// reconcile is called when a revision-checked write on key was refused, or when the KV
// disagrees with the view: it returns the condition of the view showing what the KV holds
// now. A view that never gets there (it missed events) is read afresh (lineView.read).
func (q *MergeQueue) reconcile(ctx context.Context, line, key string) (until, error) {
	kve, err := q.KV.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return gone(key), nil
	}
	if err != nil {
		return nil, fmt.Errorf("merge queue %s: read %s: %w", line, key, err)
	}
	return seqAtLeast(kve.Revision()), nil
}

// current checks the view's entry e against the KV; when they differ it returns the
// condition of the view catching up.
func (q *MergeQueue) current(ctx context.Context, line string, e *entry) (bool, until, error) {
	kve, err := q.KV.Get(ctx, e.key)
	if err == nil && kve.Revision() == e.rev {
		return true, nil, nil
	}
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, gone(e.key), nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("merge queue %s: read %s: %w", line, e.key, err)
	}
	return false, seqAtLeast(kve.Revision()), nil
}

// rewrite stores e again, changed by change, keeping its place; ok is false when the key
// changed since the view read it. next is what the view must show before the line is read
// again.
func (q *MergeQueue) rewrite(ctx context.Context, line string, e *entry, change func(*entryValue)) (next until, ok bool, err error) {
	v := e.entryValue
	v.Order, v.Touched = e.order(), time.Now()
	if change != nil {
		change(&v)
	}
	data, _ := json.Marshal(v)
	rev, err := q.KV.Update(ctx, e.key, data, e.rev)
	if conflict(err) {
		next, err = q.reconcile(ctx, line, e.key)
		return next, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("merge queue %s: write entry %s: %w", line, e.ID, err)
	}
	return seqAtLeast(rev), true, nil
}

// drop deletes e if its key is still at the revision read.
func (q *MergeQueue) drop(ctx context.Context, line string, e *entry) (bool, error) {
	err := q.KV.Delete(ctx, e.key, jetstream.LastRevision(e.rev))
	if conflict(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("merge queue %s: remove entry %s: %w", line, e.ID, err)
	}
	return true, nil
}

// fence writes line's fence key and returns the condition of the view having seen it, and
// so everything written to the line before this call (by any process).
func (q *MergeQueue) fence(ctx context.Context, line string) (until, error) {
	rev, err := q.KV.Put(ctx, fenceKey(line), nil)
	if err != nil {
		return nil, fmt.Errorf("merge queue %s: fence: %w", line, err)
	}
	return seqAtLeast(rev), nil
}

// migrate moves an old-format line value (a worker upgraded while merges wait) to one key
// per entry, keeping their order ahead of every entry created since (whose revisions are
// higher than the value's), and then deletes the value if nobody rewrote it meanwhile.
// Creating first and deleting last loses no entry if this process dies between.
func (q *MergeQueue) migrate(ctx context.Context, line string, old jetstream.KeyValueEntry) (until, error) {
	var l mergeLine
	if err := json.Unmarshal(old.Value(), &l); err != nil {
		return nil, fmt.Errorf("merge queue %s: unreadable old-format line (key %s, revision %d): %w", line, old.Key(), old.Revision(), err)
	}
	now := time.Now()
	for i, qe := range l.Entries {
		if qe.ID == "" || checkEntry(line, qe.ID) != nil {
			continue
		}
		data, _ := json.Marshal(entryValue{QueueEntry: qe, Order: old.Revision(), Sub: i + 1, Touched: now})
		if _, err := q.KV.Create(ctx, entryKey(line, qe.ID), data); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("merge queue %s: move entry %s of the old-format line: %w", line, qe.ID, err)
		}
	}
	if err := q.KV.Delete(ctx, lineKV(line), jetstream.LastRevision(old.Revision())); err != nil && !conflict(err) {
		return nil, fmt.Errorf("merge queue %s: delete the old-format line: %w", line, err)
	}
	rev := old.Revision()
	return func(v *lineView) bool { return v.old == nil || v.old.Revision() != rev }, nil
}

// read returns line's entries in order from this process's view once it meets u.
func (q *MergeQueue) read(ctx context.Context, line string, u until) ([]*entry, error) {
	for range 100 {
		es, old, err := q.view(line).read(ctx, u)
		if errors.Is(err, errViewClosed) {
			continue // it went idle just now: the next view() starts a new one
		}
		if err != nil {
			return nil, err
		}
		if old == nil {
			return es, nil
		}
		if u, err = q.migrate(ctx, line, old); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("merge queue %s: the line keeps changing while it is read", line)
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
// it (a redelivery or a woken park keeps its place). A head that is gone is removed on the
// way. At the head, Join takes the line's lease for id; Place.Lease is nil when the lease is
// still held (the previous head is releasing it): the caller retries shortly.
//
// A new entry is one create of its own key (which also keeps two deliveries of the same step
// from joining twice); its place is the order of that create among the line's keys, read from
// the view once the view shows the create (and so every create before it).
func (q *MergeQueue) Join(ctx context.Context, line, id string) (*Place, error) {
	if err := checkEntry(line, id); err != nil {
		return nil, err
	}
	key := entryKey(line, id)
	indexed, created := false, false
	var u until
	for range 100 {
		es, err := q.read(ctx, line, u)
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
			data, _ := json.Marshal(entryValue{QueueEntry: QueueEntry{ID: id, At: now}, Touched: now})
			rev, err := q.KV.Create(ctx, key, data)
			switch {
			case err == nil:
				u, created = seqAtLeast(rev), true
			case errors.Is(err, jetstream.ErrKeyExists):
				// Another delivery of this step joined meanwhile, or the view lags behind it.
				if u, err = q.reconcile(ctx, line, key); err != nil {
					return nil, err
				}
			default:
				return nil, fmt.Errorf("merge queue %s: join %s: %w", line, id, err)
			}
			continue
		}
		me := es[pos]
		if now.Sub(me.Touched) > lineTouch {
			// A long wait: rewritten so that the bucket's max age does not take it.
			if u, _, err = q.rewrite(ctx, line, me, nil); err != nil {
				return nil, err
			}
			continue
		}
		if pos > 0 && !created {
			// A woken or polling merge: check that the head it waits behind is still there,
			// so a view that missed the head leaving does not keep it waiting.
			ok, next, err := q.current(ctx, line, es[0])
			if err != nil {
				return nil, err
			}
			if !ok {
				u = next
				continue
			}
		}
		if pos > 0 && !es[0].Head.IsZero() {
			ok, err := q.alive(ctx, line, es[0].QueueEntry, now)
			if err != nil {
				return nil, err
			}
			if !ok {
				// Gone: removed (if nobody changed it since), and the next made the head below.
				dropped, err := q.drop(ctx, line, es[0])
				if err != nil {
					return nil, err
				}
				if u = moved(es[0].key, es[0].rev); !dropped {
					if u, err = q.reconcile(ctx, line, es[0].key); err != nil {
						return nil, err
					}
				}
				continue
			}
		}
		if es[0].Head.IsZero() {
			next, ok, err := q.rewrite(ctx, line, es[0], func(v *entryValue) { v.Head = now })
			if err != nil {
				return nil, err
			}
			if ok && es[0].ID != id {
				q.signal(ctx, line, es[0].ID)
			}
			u = next
			continue
		}
		p := &Place{Line: line, ID: id, Position: pos, WakeKey: TurnKey(line, id)}
		if pos == 0 {
			// The decision that matters is checked against the KV, not the view: this entry
			// is still there as the view shows it (nobody removed it as a dead head).
			ok, next, err := q.current(ctx, line, me)
			if err != nil {
				return nil, err
			}
			if !ok {
				u = next
				continue
			}
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
// Only the entry's own key is deleted; the others are read from the view only when the head
// leaves.
func (q *MergeQueue) Leave(ctx context.Context, line, id string, lease *Lease) error {
	if lease != nil {
		_ = lease.Release(ctx)
	}
	if err := checkEntry(line, id); err != nil {
		return err
	}
	key := entryKey(line, id)
	var u until
	for range 100 {
		es, err := q.read(ctx, line, u)
		if err != nil {
			return err
		}
		var e *entry
		if i := indexOf(es, id); i >= 0 {
			e = es[i]
		} else {
			// Not in this view: it may lag behind a join made by another worker.
			kve, err := q.KV.Get(ctx, key)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("merge queue %s: leave %s: %w", line, id, err)
			}
			e = &entry{key: key, rev: kve.Revision()}
			_ = json.Unmarshal(kve.Value(), &e.entryValue) // unreadable, it is deleted all the same
		}
		ok, err := q.drop(ctx, line, e)
		if err != nil {
			return err
		}
		if !ok {
			if u, err = q.reconcile(ctx, line, key); err != nil {
				return err
			}
			continue // rewritten meanwhile (it became the head): read it again
		}
		if !e.Head.IsZero() {
			return q.promote(ctx, line, moved(key, e.rev))
		}
		q.view(line).forget(key, e.rev)
		return nil
	}
	return fmt.Errorf("merge queue %s: too many concurrent updates", line)
}

// promote makes the first entry of line the head and wakes it, unless it is already, once the
// view meets u.
func (q *MergeQueue) promote(ctx context.Context, line string, u until) error {
	for range 100 {
		es, err := q.read(ctx, line, u)
		if err != nil {
			return err
		}
		if len(es) == 0 || !es[0].Head.IsZero() {
			return nil
		}
		next, ok, err := q.rewrite(ctx, line, es[0], func(v *entryValue) { v.Head = time.Now() })
		if err != nil {
			return err
		}
		if ok {
			q.signal(ctx, line, es[0].ID)
			return nil
		}
		u = next
	}
	return fmt.Errorf("merge queue %s: too many concurrent updates", line)
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
		if checkLine(line) != nil {
			_ = q.KV.Purge(ctx, k)
			continue
		}
		n, err := q.removeWhere(ctx, line, func(e *entry) bool { return strings.HasPrefix(e.ID, prefix) })
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

// removeWhere drops the entries of line that match (as of now: the view is fenced first,
// so a join of another worker that came before is seen) and wakes a new head.
func (q *MergeQueue) removeWhere(ctx context.Context, line string, match func(*entry) bool) (int, error) {
	u, err := q.fence(ctx, line)
	if err != nil {
		return 0, err
	}
	n, head := 0, false
	for range 100 {
		es, err := q.read(ctx, line, u)
		if err != nil {
			return n, err
		}
		var done []until
		for _, e := range es {
			if !match(e) {
				continue
			}
			ok, err := q.drop(ctx, line, e)
			if err != nil {
				return n, err
			}
			if !ok {
				next, err := q.reconcile(ctx, line, e.key)
				if err != nil {
					return n, err
				}
				done = append(done, next)
				continue
			}
			n++
			head = head || !e.Head.IsZero()
			done = append(done, moved(e.key, e.rev))
		}
		if len(done) == 0 {
			break
		}
		u = all(done...)
	}
	if head {
		return n, q.promote(ctx, line, u)
	}
	return n, nil
}

// Entries returns line's entries in order (for status and tests), including every change
// made before the call by any process.
func (q *MergeQueue) Entries(ctx context.Context, line string) ([]QueueEntry, error) {
	if err := checkLine(line); err != nil {
		return nil, err
	}
	u, err := q.fence(ctx, line)
	if err != nil {
		return nil, err
	}
	es, err := q.read(ctx, line, u)
	if err != nil {
		return nil, err
	}
	out := make([]QueueEntry, len(es))
	for i, e := range es {
		out[i] = e.QueueEntry
	}
	return out, nil
}

// Close stops the watches of this MergeQueue's line views.
func (q *MergeQueue) Close() {
	q.mu.Lock()
	vs := q.views
	q.views = nil
	q.mu.Unlock()
	for _, v := range vs {
		v.stop()
		<-v.done
	}
}

// errViewClosed is returned by a view that stopped (idle, or its MergeQueue closed).
var errViewClosed = errors.New("merge queue: line view closed")

// lineView is one process's picture of one line: its live entries by key, kept by one watch
// of the line's keys, so that joining, leaving and finding a place read memory instead of
// listing keys. The watch is an ordered consumer: it delivers in stream order and restarts
// where it stopped after a gap or a reconnect, so once the view applied the stream up to
// sequence s it knows every entry created before s. A view can still be behind the KV; what
// depends on it is written with a revision check, and a refused write or a check against the
// KV makes the caller wait until the view shows what the KV holds. A view that does not get
// there within catchUp (it missed events) is read afresh from a new watch.
type lineView struct {
	q      *MergeQueue
	line   string
	stop   context.CancelFunc
	done   chan struct{}
	resync chan struct{} // (buffered) asks the watch loop to read the line afresh

	mu      sync.Mutex
	changed chan struct{} // closed at every change, then replaced
	entries *lineEntries  // the live entries
	old     jetstream.KeyValueEntry
	seq     uint64 // the last stream sequence applied
	ready   bool   // the current watch's initial values are in
	closed  bool
	err     error // why the watch is not running
	used    time.Time
	reads   int  // watches started (a fresh read each); for tests
	deaf    bool // tests: drop every update until the next fresh read, as a lost watch would
}

// view returns this process's view of line, starting it when there is none.
func (q *MergeQueue) view(line string) *lineView {
	q.mu.Lock()
	defer q.mu.Unlock()
	if v := q.views[line]; v != nil {
		v.mu.Lock()
		v.used = time.Now()
		v.mu.Unlock()
		return v
	}
	if q.views == nil {
		q.views = map[string]*lineView{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	v := &lineView{q: q, line: line, stop: cancel, done: make(chan struct{}), resync: make(chan struct{}, 1),
		changed: make(chan struct{}), entries: newLineEntries(), used: time.Now()}
	q.views[line] = v
	go v.run(ctx)
	return v
}

func (v *lineView) run(ctx context.Context) {
	defer close(v.done)
	defer func() {
		v.mu.Lock()
		v.closed = true
		v.broadcast()
		v.mu.Unlock()
	}()
	wait := 50 * time.Millisecond
	for ctx.Err() == nil {
		w, err := v.q.KV.WatchFiltered(ctx, []string{"q." + v.line + ".*", lineKV(v.line), fenceKey(v.line)})
		if err != nil {
			v.mu.Lock()
			v.err = err
			v.broadcast()
			v.mu.Unlock()
			if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionDraining) {
				v.drop()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 5*time.Second)
			continue
		}
		wait = 50 * time.Millisecond
		end := v.follow(ctx, w)
		_ = w.Stop()
		if end {
			return
		}
	}
}

// follow applies w's updates to the view until the view should be read afresh (false) or end
// (true: idle, or stopped).
func (v *lineView) follow(ctx context.Context, w jetstream.KeyWatcher) bool {
	v.mu.Lock()
	v.ready, v.deaf, v.err = false, false, nil
	v.reads++
	v.mu.Unlock()
	fresh := newLineEntries()
	var old jetstream.KeyValueEntry
	var seq uint64
	initial, started := true, time.Now()
	every := v.q.idleAfter
	if every <= 0 {
		every = viewIdle
	}
	tick := time.NewTicker(min(time.Minute, every/2))
	defer tick.Stop()
	resync := v.q.resyncEvery
	if resync <= 0 {
		resync = viewResync
	}
	// After a reconnect the line is read afresh at once: the watch may have missed what was
	// written while the connection was down, and would only find out after a while.
	var reconnected chan nats.Status
	if nc := v.q.conn(); nc != nil {
		reconnected = nc.StatusChanged(nats.CONNECTED)
		defer nc.RemoveStatusListener(reconnected)
	}
	for {
		select {
		case <-ctx.Done():
			return true
		case <-v.resync:
			return false
		case <-reconnected:
			return false
		case <-tick.C:
			if v.idle(every) {
				return true
			}
			if time.Since(started) > resync {
				return false
			}
		case e, ok := <-w.Updates():
			if !ok {
				v.mu.Lock()
				v.err = errors.New("the watch stopped")
				v.mu.Unlock()
				return false
			}
			switch {
			case e == nil && initial:
				initial = false
				v.mu.Lock()
				v.entries, v.old, v.seq, v.ready = fresh, old, max(v.seq, seq), true
				v.broadcast()
				v.mu.Unlock()
			case e == nil:
			case initial:
				seq = max(seq, e.Revision())
				v.q.apply(v.line, fresh, &old, e)
			default:
				v.mu.Lock()
				if !v.deaf {
					v.seq = max(v.seq, e.Revision())
					v.q.apply(v.line, v.entries, &v.old, e)
					v.broadcast()
				}
				v.mu.Unlock()
			}
		}
	}
}

// apply puts one watched key into entries (or old, for the old-format value).
func (q *MergeQueue) apply(line string, entries *lineEntries, old *jetstream.KeyValueEntry, kve jetstream.KeyValueEntry) {
	del := kve.Operation() != jetstream.KeyValuePut
	switch k := kve.Key(); {
	case k == fenceKey(line):
	case k == lineKV(line) && del:
		*old = nil
	case k == lineKV(line):
		*old = kve
	case del:
		entries.del(k)
	default:
		e, err := parseEntry(line, kve)
		if err != nil {
			// Left out rather than blocking every merge to the branch behind it.
			q.log().Warn("merge queue: a key that is not an entry is left out of its line",
				"line", line, "key", k, "revision", kve.Revision(), "err", err)
			entries.del(k)
			return
		}
		entries.put(e)
	}
}

// parseEntry reads an entry key's value; it must name the entry the key is for.
func parseEntry(line string, kve jetstream.KeyValueEntry) (*entry, error) {
	e := &entry{key: kve.Key(), rev: kve.Revision()}
	if err := json.Unmarshal(kve.Value(), &e.entryValue); err != nil {
		return nil, fmt.Errorf("unreadable entry: %w", err)
	}
	switch {
	case e.ID == "":
		return nil, errors.New("unreadable entry: no id")
	case entryKey(line, e.ID) != kve.Key():
		return nil, fmt.Errorf("entry %.80q does not belong at this key", e.ID)
	case e.Order > e.rev:
		return nil, fmt.Errorf("entry %.80q claims order %d, after its own revision %d", e.ID, e.Order, e.rev)
	}
	return e, nil
}

// broadcast wakes the readers waiting for a change; v.mu is held.
func (v *lineView) broadcast() {
	close(v.changed)
	v.changed = make(chan struct{})
}

// idle ends the view when nobody used it for every.
func (v *lineView) idle(every time.Duration) bool {
	v.q.mu.Lock()
	defer v.q.mu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	if time.Since(v.used) < every {
		return false
	}
	if v.q.views[v.line] == v {
		delete(v.q.views, v.line)
	}
	return true
}

// drop takes the view out of its MergeQueue (its connection closed).
func (v *lineView) drop() {
	v.q.mu.Lock()
	defer v.q.mu.Unlock()
	if v.q.views[v.line] == v {
		delete(v.q.views, v.line)
	}
}

// forget takes key out of the view after this process deleted it at rev; the watch brings
// the delete too, later. A newer revision (the same merge joined again since) stays.
func (v *lineView) forget(key string, rev uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e := v.entries.byKey[key]; e != nil && e.rev == rev {
		v.entries.del(key)
		v.broadcast()
	}
}

// read returns the view's entries in line order, and an old-format value to move, once the
// view is ready and meets u (nil: ready is enough). A view that does not meet u within
// catchUp is read afresh; after three tries it is an error.
func (v *lineView) read(ctx context.Context, u until) ([]*entry, jetstream.KeyValueEntry, error) {
	wait := v.q.catchUp
	if wait <= 0 {
		wait = viewCatchUp
	}
	for try := 1; ; try++ {
		t := time.NewTimer(wait)
	waiting:
		for {
			v.mu.Lock()
			if v.closed {
				v.mu.Unlock()
				t.Stop()
				return nil, nil, errViewClosed
			}
			if v.ready && (u == nil || u(v)) {
				es := slices.Clone(v.entries.list)
				old := v.old
				v.used = time.Now()
				v.mu.Unlock()
				t.Stop()
				return es, old, nil
			}
			changed, err := v.changed, v.err
			v.mu.Unlock()
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, nil, fmt.Errorf("merge queue %s: read: %w", v.line, ctx.Err())
			case <-changed:
			case <-t.C:
				if try == 3 {
					if err == nil {
						err = errors.New("it does not show the line's last writes")
					}
					return nil, nil, fmt.Errorf("merge queue %s: the line's view is still behind after %s: %w", v.line, 3*wait, err)
				}
				break waiting
			}
		}
		select {
		case v.resync <- struct{}{}:
		default:
		}
	}
}

// lineEntries are a line's live entries by key and in line order. An entry is never changed
// in place (a new value replaces it), so readers may keep a copy of list.
type lineEntries struct {
	byKey map[string]*entry
	list  []*entry // in line order
}

func newLineEntries() *lineEntries { return &lineEntries{byKey: map[string]*entry{}} }

func before(a, b *entry) int {
	return cmp.Or(cmp.Compare(a.order(), b.order()), cmp.Compare(a.Sub, b.Sub), strings.Compare(a.key, b.key))
}

// put adds or replaces e; a new entry normally goes at the end, so this is a binary search
// and an append.
func (l *lineEntries) put(e *entry) {
	l.del(e.key)
	l.byKey[e.key] = e
	i, _ := slices.BinarySearchFunc(l.list, e, before)
	l.list = slices.Insert(l.list, i, e)
}

func (l *lineEntries) del(key string) {
	e := l.byKey[key]
	if e == nil {
		return
	}
	delete(l.byKey, key)
	if i, ok := slices.BinarySearchFunc(l.list, e, before); ok {
		l.list = slices.Delete(l.list, i, i+1)
	}
}
