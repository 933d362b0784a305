package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
)

// Execution leases keep one job from running twice at the same time.
//
// JetStream redelivers a job whose AckWait passed without a heartbeat. After a server restart
// that happens while the first delivery still runs: the restored consumer state holds the
// heartbeat time from before the outage, and the server hands the job out again within
// milliseconds of coming back, before the running worker has even reconnected to send its
// InProgress. No heartbeat timing can win that race, so each execution holds a key in the
// locks bucket for its job, renewed with its heartbeats; a redelivery that finds the key held
// by a live execution leaves the job to it (no ack, no nak: the holder acks it by its stream
// sequence) and only takes over from a holder that is gone.

// errLeaseLost is the cause a step is cancelled with when another delivery took its job over
// (this worker was cut off for longer than the takeover window).
var errLeaseLost = errors.New("execution lease lost: another delivery of this job took it over")

// ExecQuerySubject is the core-NATS subject a worker answers "do you still run job X?" on.
func ExecQuerySubject(workerID string) string { return "prflow.control.exec." + queue.Token(workerID) }

// Answers to an execution query.
const (
	execRunning = "running"
	execIdle    = "idle"
)

type execValue struct {
	Holder string    `json:"holder"` // worker id
	Job    string    `json:"job"`
	At     time.Time `json:"at"`
	// Released: the execution ended (a result, or a nak asking for this redelivery). A
	// released lease is left in place, not deleted, so that a redelivery can tell "ended" from
	// "no lease at all", which after a server crash may mean the lease write was lost while
	// its execution still runs.
	Released bool `json:"released,omitempty"`
}

// execLease is one execution's hold on its job.
type execLease struct {
	kv   jetstream.KeyValue // nil: an execution of a pure step, which holds no lease in the bucket
	key  string
	val  []byte
	mu   sync.Mutex
	rev  uint64
	fut  jetstream.PubAckFuture // the first delivery's lease is written without waiting
	lost atomic.Bool
	busy atomic.Bool // a renewal is under way
	// onLost cancels the step.
	onLost func()
}

func execKey(job string) string { return queue.LeaseKey("exec", job) }

func (w *Worker) execValue(job string) []byte {
	b, _ := json.Marshal(execValue{Holder: w.ID, Job: job, At: time.Now()})
	return b
}

// revision is the lease's current revision, waiting for the first write's acknowledgement.
// Lock held.
func (l *execLease) revision() uint64 {
	if l.fut != nil {
		select {
		case ack := <-l.fut.Ok():
			l.rev = ack.Sequence
		case <-l.fut.Err():
		case <-time.After(5 * time.Second):
		}
		l.fut = nil
	}
	return l.rev
}

// renew rewrites the lease if this execution still has it. It marks the lease lost (and
// cancels the step) when someone else took it over; other errors (an outage) are left for the
// next beat.
func (l *execLease) renew(ctx context.Context) {
	if l == nil || l.kv == nil || l.lost.Load() || !l.busy.CompareAndSwap(false, true) {
		return
	}
	defer l.busy.Store(false)
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rev := l.revision()
	var err error
	var nrev uint64
	if rev == 0 {
		nrev, err = l.kv.Create(ctx, l.key, l.val)
	} else {
		nrev, err = l.kv.Update(ctx, l.key, l.val, rev)
	}
	switch {
	case err == nil:
		l.rev = nrev
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// Expired while the server was away (its age counts from the last write): write it
		// again unless another delivery has meanwhile.
		if nrev, err = l.kv.Create(ctx, l.key, l.val); err == nil {
			l.rev = nrev
		} else if errors.Is(err, jetstream.ErrKeyExists) {
			l.markLost()
		}
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyExists):
		l.markLost()
	}
}

func (l *execLease) markLost() {
	if l.lost.CompareAndSwap(false, true) && l.onLost != nil {
		l.onLost()
	}
}

// release marks the lease released if this execution still has it (the bucket's TTL removes
// it later).
func (l *execLease) release() {
	if l == nil || l.kv == nil || l.lost.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	if rev := l.revision(); rev != 0 {
		var v execValue
		_ = json.Unmarshal(l.val, &v)
		v.Released, v.At = true, time.Now()
		b, _ := json.Marshal(v)
		if _, err := l.kv.Update(ctx, l.key, b, rev); err != nil && !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			_ = l.kv.Delete(ctx, l.key, jetstream.LastRevision(rev))
		}
	}
}

// unclaimedGrace is how long a redelivery that found no lease at all holds its new lease
// before it runs: any live execution renews its lease within renewEvery (at once after a
// reconnect), finds it taken and stops, before this one starts.
func (w *Worker) unclaimedGrace() time.Duration { return w.renewEvery() + time.Second }

// renewEvery is how often heartbeats (InProgress and lease renewal) go: a third of AckWait,
// and often enough that the lease outlives no renewal in the locks bucket's TTL.
func (w *Worker) renewEvery() time.Duration { return min(w.Tuning.AckWait, queue.LeaseTTL) / 3 }

// takeoverAfter is how long a redelivery waits for a sign of life (an answer to its query, a
// renewal of the lease) from the execution holding the job before it counts as gone.
func (w *Worker) takeoverAfter() time.Duration { return 2*w.renewEvery() + time.Second }

// claim decides whether this delivery of job runs. A first delivery writes its lease without
// waiting (nothing else can hold a job delivered for the first time). A redelivery takes the
// lease only from nobody, from an execution that says it is idle, or from one that showed no
// sign of life for takeoverAfter; run is false when another execution of the job is alive.
func (w *Worker) claim(ctx context.Context, msg *queue.Msg, job string, delivered int) (l *execLease, run bool, err error) {
	l = &execLease{kv: w.locks, key: execKey(job), val: w.execValue(job)}
	// Shortly after a reconnect (the server may have restarted and lost recent writes: a
	// lease, or even the delivery count) a job with no lease is not trusted to be free.
	afterReconnect := false
	if at := w.reconnectedAt.Load(); at != 0 && time.Since(time.Unix(0, at)) < w.unclaimedGrace() {
		afterReconnect = true
	}
	if delivered <= 1 && !afterReconnect {
		fut, perr := w.conn.JS.PublishAsync("$KV."+queue.BucketLocks+"."+l.key, l.val)
		if perr == nil {
			l.fut = fut
			return l, true, nil
		}
		// Not even queued (the connection is closing): take the slow path.
	}
	var (
		seenRev   uint64
		seenSince time.Time
		lastBeat  = time.Now()
		seenKey   bool // a lease (held or released) was there: not a lost one
	)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		if time.Since(lastBeat) >= w.renewEvery() {
			_ = msg.InProgress() // deciding takes a while: keep this delivery from a third one
			lastBeat = time.Now()
		}
		rev, cerr := w.locks.Create(ctx, l.key, l.val)
		if cerr == nil {
			l.rev = rev
			if seenKey || (delivered <= 1 && !afterReconnect) {
				return l, true, nil
			}
			// Redelivered (or handed out right after a server restart), and no lease at all:
			// a previous execution may still run with its lease lost (a server killed right
			// after the lease was written). Hold this lease for unclaimedGrace: a live
			// execution renewing meanwhile finds it taken and stops.
			w.Log.Info("redelivered job has no execution lease; waiting for a live execution to show itself",
				"job", job, "delivery", delivered, "wait", w.unclaimedGrace().String())
			for end := time.Now().Add(w.unclaimedGrace()); time.Now().Before(end); {
				if err := scm.Sleep(ctx, min(time.Until(end), w.renewEvery())); err != nil {
					return nil, false, err
				}
				_ = msg.InProgress()
			}
			e, gerr := w.locks.Get(ctx, l.key)
			if gerr == nil && e.Revision() == l.rev {
				return l, true, nil
			}
			seenKey = true // changed under us: decide again from what is there
			continue
		}
		if errors.Is(cerr, jetstream.ErrKeyExists) {
			seenKey = true
		} else {
			if ctx.Err() != nil {
				return nil, false, ctx.Err()
			}
			if seenSince.IsZero() {
				seenSince = time.Now()
			} else if time.Since(seenSince) > w.takeoverAfter() {
				return nil, false, fmt.Errorf("execution lease %s: %w", l.key, cerr)
			}
			if err := scm.Sleep(ctx, wait); err != nil {
				return nil, false, err
			}
			continue
		}
		e, gerr := w.locks.Get(ctx, l.key)
		if errors.Is(gerr, jetstream.ErrKeyNotFound) {
			continue // released meanwhile: create it
		}
		if gerr != nil {
			if err := scm.Sleep(ctx, wait); err != nil {
				return nil, false, err
			}
			continue
		}
		var cur execValue
		_ = json.Unmarshal(e.Value(), &cur)
		takeOver := false
		switch {
		case cur.Released:
			takeOver = true // that execution ended
		case cur.Holder == w.ID:
			// handle found no other delivery of the job running here: a worker that
			// restarted under the same id left it.
			takeOver = true
		default:
			switch w.queryHolder(ctx, cur.Holder, job) {
			case execRunning:
			case execIdle:
				takeOver = true
			default: // no answer: gone, or still reconnecting after an outage
				if e.Revision() != seenRev {
					if seenRev != 0 {
						return nil, false, nil // renewed meanwhile: alive
					}
					seenRev, seenSince = e.Revision(), time.Now()
				}
				if time.Since(seenSince) < w.takeoverAfter() {
					if err := scm.Sleep(ctx, wait); err != nil {
						return nil, false, err
					}
					continue
				}
				takeOver = true
			}
		}
		if !takeOver {
			return nil, false, nil
		}
		rev, uerr := w.locks.Update(ctx, l.key, l.val, e.Revision())
		if uerr == nil {
			l.rev = rev
			return l, true, nil
		}
		// Changed under us (renewed, released, or another redelivery took it): look again.
	}
}

// queryHolder asks worker holder whether it still runs job: execRunning, execIdle, or "" for
// no answer.
func (w *Worker) queryHolder(ctx context.Context, holder, job string) string {
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	m, err := w.conn.NC.RequestWithContext(qctx, ExecQuerySubject(holder), []byte(job))
	if err != nil {
		return ""
	}
	return string(m.Data)
}

// answerQuery tells another worker whether this one still runs a job; when it does, it sends
// the job's heartbeat at once (the asker got the job because the server saw none in time).
func (w *Worker) answerQuery(m *nats.Msg) {
	job := string(m.Data)
	w.mu.Lock()
	f := w.inflight[job]
	w.mu.Unlock()
	if f == nil {
		_ = m.Respond([]byte(execIdle))
		return
	}
	_ = f.msg.InProgress()
	_ = m.Respond([]byte(execRunning))
}

// inflightJob is a job this worker runs, with what a reconnect must refresh.
type inflightJob struct {
	msg   *queue.Msg
	lease *execLease
}

// track registers msg as job's execution on this worker; false when another delivery of the
// same job already runs here.
func (w *Worker) trackExec(job string, msg *queue.Msg) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inflight[job] != nil {
		return false
	}
	w.inflight[job] = &inflightJob{msg: msg}
	return true
}

func (w *Worker) setLease(job string, l *execLease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if f := w.inflight[job]; f != nil {
		f.lease = l
	}
}

// forgetExec ends msg's execution of job without deleting its lease (the job is settled).
func (w *Worker) forgetExec(job string, msg *queue.Msg) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if f := w.inflight[job]; f != nil && f.msg == msg {
		delete(w.inflight, job)
	}
}

// untrackExec ends msg's execution of job: its lease goes, and the job is no longer in flight.
func (w *Worker) untrackExec(job string, msg *queue.Msg, l *execLease) {
	l.release()
	w.mu.Lock()
	defer w.mu.Unlock()
	if f := w.inflight[job]; f != nil && f.msg == msg {
		delete(w.inflight, job)
	}
}

// beatAll sends every in-flight job's heartbeat and renews its lease: after a reconnect the
// server may have restarted and lost the heartbeats sent while it was away.
func (w *Worker) beatAll(ctx context.Context) {
	w.mu.Lock()
	jobs := make([]*inflightJob, 0, len(w.inflight))
	for _, f := range w.inflight {
		jobs = append(jobs, f)
	}
	w.mu.Unlock()
	for _, f := range jobs {
		_ = f.msg.InProgress()
	}
	for _, f := range jobs {
		f.lease.renew(ctx) // nil while its claim is under way
	}
}
