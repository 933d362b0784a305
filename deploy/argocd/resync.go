package argocd

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/prflow/prflow/deploy/agent"
)

// Why the agent re-lists while its watch stream is up.
//
// Argo CD's API server hands each watch stream its events through a buffered channel
// (ARGOCD_WATCH_API_BUFFER_SIZE, default 1000). Its broadcaster drops an event when that buffer
// is full and tells nobody: the stream stays open, no message marks the loss, and
// resourceVersions cannot show it (they are the cluster's, shared with every other object, so
// gaps are normal and prove nothing). What the agent can see is the pressure that causes a
// drop: the buffer only fills while the agent reads slower than Argo CD writes, and then the
// agent receives the whole buffer back to back. So the agent
//   - re-lists early, once the stream calms down, after receiving half a buffer of events back
//     to back (dropDetector), and
//   - re-lists every Resync anyway (jittered), for the drops it cannot see, like an
//     informer's resync.
//
// A re-list writes only the records that differ from Argo CD's list (agent.Writer), never an
// older resourceVersion over a newer one, and turns apps missing from the list into tombstones.

const (
	// backToBack: an event that follows the previous one's processing this closely was
	// already waiting (Argo CD had it queued).
	backToBack = 50 * time.Millisecond
	// calmQuiet and calmMax bound the wait for a busy stream to calm down before an early
	// re-list, so the list does not compete with the burst it repairs.
	calmQuiet = 250 * time.Millisecond
	calmMax   = 2 * time.Second
	// earlyBackoff is the first wait after an early re-list that repaired nothing, doubling up
	// to maxEarlyBackoff while they keep finding nothing. The periodic re-list is not delayed.
	earlyBackoff    = 10 * time.Second
	maxEarlyBackoff = 5 * time.Minute
)

// dropDetector watches one stream for runs of back-to-back events. With events arriving at
// random at rate r per second, a pause of backToBack or more comes with probability
// exp(-r·backToBack): at r = 55/s (10,000 apps reconciled every 3 minutes) that is one event in
// sixteen, each taking back a twentieth of the threshold, so the run stays far below it. Much
// busier streams can set it off without a drop; an early re-list that repaired nothing makes
// the next one wait (earlyBackoff), so such false alarms cost little.
type dropDetector struct {
	threshold int           // events in a run that suggest an overflow (0: off)
	kick      chan struct{} // an early re-list is due (capacity 1)
	epoch     atomic.Int64  // bumped when a re-list sends its list request: earlier drops are covered
	lastEvent atomic.Int64  // unix nanoseconds of the last event

	// Used by the stream's goroutine only.
	seen   int64
	run    int
	doneAt time.Time
}

func newDropDetector(threshold int) *dropDetector {
	return &dropDetector{threshold: max(threshold, 0), kick: make(chan struct{}, 1)}
}

// observe records one event that arrived at arrived and was processed by done. counts is false
// for an event that cannot tell of pressure: the ADDED replay of an app the agent already has
// unchanged, which Argo CD sends at the start of every stream.
func (d *dropDetector) observe(arrived, done time.Time, counts bool) {
	d.lastEvent.Store(done.UnixNano())
	if d.threshold == 0 {
		return
	}
	if e := d.epoch.Load(); e != d.seen {
		d.seen, d.run = e, 0
	}
	// A stream that went quiet ends the run. A shorter pause only sets it back a twentieth of
	// the threshold: on a loaded machine the agent itself stalls now and then in the middle
	// of a backlog, while a steady trickle of events (many short pauses) never builds a run.
	switch gap := arrived.Sub(d.doneAt); {
	case d.doneAt.IsZero() || gap >= calmQuiet:
		d.run = 0
	case gap >= backToBack:
		d.run = max(d.run-max(d.threshold/20, 1), 0)
	}
	d.doneAt = done
	if !counts {
		return
	}
	d.run++
	if d.run >= d.threshold {
		d.run = 0
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
}

// calm waits until no event arrived for quiet, at most limit, or until ctx ends.
func (d *dropDetector) calm(ctx context.Context, quiet, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for {
		wait := min(quiet-time.Since(time.Unix(0, d.lastEvent.Load())), time.Until(deadline))
		if wait <= 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// ResyncStats say how the agent's re-lists went since it started.
type ResyncStats struct {
	Resyncs  int64     // full re-lists finished (after connecting, periodic, early)
	Early    int64     // of those, started because events may have been dropped
	Repaired int64     // records re-lists found behind Argo CD while the stream was up
	Failed   int64     // re-lists that failed (Argo CD did not answer the list)
	Last     time.Time // when the last re-list finished (zero: none yet)
}

// Resyncs reports the agent's re-lists.
func (a *Agent) Resyncs() ResyncStats {
	last, _ := a.lastResync.Load().(time.Time)
	return ResyncStats{Resyncs: a.resyncs.Load(), Early: a.earlyResyncs.Load(), Repaired: a.repaired.Load(),
		Failed: a.failedResyncs.Load(), Last: last}
}

func (a *Agent) resynced(repaired int) {
	a.resyncs.Add(1)
	a.repaired.Add(int64(repaired))
	a.lastResync.Store(time.Now().UTC())
	a.reregister()
}

// resyncLoop re-lists every Resync (jittered down by up to a fifth, so no record is wrong
// longer than Resync), and early when d suspects dropped events, until ctx ends. It runs while
// the stream is up, after the re-list that follows connecting.
func (a *Agent) resyncLoop(ctx context.Context, w *agent.Writer, d *dropDetector) {
	retry := time.Duration(0)
	var lastEarly time.Time
	earlyGap := time.Duration(0) // grows while early re-lists find nothing to repair
	// next is when the periodic re-list is due; an ignored early signal does not move it.
	next := time.Now().Add(a.resyncWait())
	for ctx.Err() == nil {
		t := time.NewTimer(time.Until(next))
		early := false
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-d.kick:
			t.Stop()
			if time.Since(lastEarly) < earlyGap {
				continue // recent early re-lists found nothing: wait for the periodic one
			}
			early = true
			d.calm(ctx, calmQuiet, calmMax)
		}
		if ctx.Err() != nil {
			return
		}
		why := "periodic re-list"
		if early {
			why = "events arrived back to back: Argo CD's watch buffer may have overflowed"
			a.earlyResyncs.Add(1)
		}
		d.epoch.Add(1)
		start := time.Now()
		repaired, n, err := a.listAndWrite(ctx, w, "missing from a full list of the apps (its deletion never came on the watch stream)")
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.failedResyncs.Add(1)
			retry = min(max(2*retry, a.o.MinBackoff), a.o.Resync)
			next = time.Now().Add(retry)
			a.o.Log.Warn("agent: re-listing applications failed; records may stay behind Argo CD until it works", "why", why, "err", err, "retry in", retry.String())
			continue
		}
		retry = 0
		next = time.Now().Add(a.resyncWait())
		if early {
			lastEarly = time.Now()
			if repaired == 0 {
				earlyGap = min(max(2*earlyGap, earlyBackoff), maxEarlyBackoff)
			} else {
				earlyGap = 0
			}
		}
		a.resynced(repaired)
		if repaired > 0 {
			a.o.Log.Warn("agent: a re-list repaired records the watch stream had not updated", "why", why, "repaired", repaired, "apps", n,
				"took", time.Since(start).Round(time.Millisecond).String())
		} else {
			a.o.Log.Debug("agent: re-listed applications; all records were current", "why", why, "apps", n)
		}
	}
}

// resyncWait is the time to the next periodic re-list: Resync, jittered down by up to a fifth
// so that replicas of many agents do not list in step, and never longer than Resync.
func (a *Agent) resyncWait() time.Duration {
	return a.o.Resync - rand.N(a.o.Resync/5+1)
}

// listAndWrite lists every app, writes the records that differ and turns apps missing from
// the list into tombstones (gone says why). It reports how many records it wrote (repaired)
// and how many apps Argo CD has.
func (a *Agent) listAndWrite(ctx context.Context, w *agent.Writer, gone string) (repaired, apps int, err error) {
	list, rv, err := a.argo.List(ctx, "")
	if err != nil {
		return 0, 0, err
	}
	present := make(map[string]bool, len(list))
	for i := range list {
		if a.isPreviewApp(&list[i]) {
			continue // a diff preview's temporary app (diffapp.go)
		}
		a.remember(&list[i], false) // the diff preview's cache key (diff.go)
		st := a.status(&list[i])
		present[st.Ref()] = true
		wrote, err := a.win.write(ctx, w, st)
		if err != nil && ctx.Err() == nil {
			a.o.Log.Warn("agent: write status", "app", st.Ref(), "err", err)
		}
		if wrote {
			repaired++
		}
	}
	a.win.retain(present)
	a.known.Range(func(k, _ any) bool {
		if !present[k.(string)] {
			a.known.Delete(k)
		}
		return true
	})
	n, err := w.RetainCount(ctx, present, rv, gone)
	if err != nil && ctx.Err() == nil {
		a.o.Log.Warn("agent: delete stale status", "err", err)
	}
	a.apps.Store(int64(len(list)))
	return repaired + n, len(list), ctx.Err()
}
