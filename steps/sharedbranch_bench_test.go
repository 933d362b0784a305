package steps_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/steps"
)

// mergeMeter measures MergePR on a shared branch: how long each merge's own work takes
// (forge merge calls and rebuild commits), how long MergePR jobs occupy worker slots, and the
// peak number of MergePR jobs in slots at once.
type mergeMeter struct {
	scm.Provider
	mu                  sync.Mutex
	work                time.Duration // inside MergePR calls and rebuild commits
	first, last         time.Time     // first merge call started, last one ended
	inSlot, peak        int
	slotTime            time.Duration
	merges, merged, err int
	parks               [][2]time.Time // runs of MergePR that ended parked in the merge queue
}

// parkedPeak is the most MergePR runs that ended parked in the queue at once in a slot, and
// the slot time they took in all.
func (m *mergeMeter) parkedPeak() (int, time.Duration) {
	peak := 0
	var total time.Duration
	for _, a := range m.parks {
		total += a[1].Sub(a[0])
		n := 0
		for _, b := range m.parks {
			if !b[0].After(a[0]) && b[1].After(a[0]) {
				n++
			}
		}
		peak = max(peak, n)
	}
	return peak, total
}

func (m *mergeMeter) MergePR(ctx context.Context, repo scm.Repo, number int, in scm.MergeInput) (*scm.PullRequest, error) {
	start := time.Now()
	pr, err := m.Provider.MergePR(ctx, repo, number, in)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.first.IsZero() {
		m.first = start
	}
	m.last = time.Now()
	m.work += time.Since(start)
	m.merges++
	if err == nil {
		m.merged++
	}
	return pr, err
}

func (m *mergeMeter) Commit(ctx context.Context, repo scm.Repo, in scm.CommitInput) (string, error) {
	start := time.Now()
	sha, err := m.Provider.Commit(ctx, repo, in)
	if in.Replace != "" {
		m.mu.Lock()
		m.work += time.Since(start) // a rebuild, done while holding the branch
		m.mu.Unlock()
	}
	return sha, err
}

// wrap counts MergePR jobs in worker slots.
func (m *mergeMeter) wrap(s steps.Step) steps.Step {
	return steps.StepFunc(func(ctx context.Context, sc *steps.Context) (steps.Result, error) {
		m.mu.Lock()
		m.inSlot++
		m.peak = max(m.peak, m.inSlot)
		m.mu.Unlock()
		start := time.Now()
		res, err := s.Run(ctx, sc)
		m.mu.Lock()
		m.inSlot--
		m.slotTime += time.Since(start)
		if err == nil && res.Status == steps.Waiting && res.Wait != nil && strings.Contains(res.Wait.Reason, "merge queue") {
			m.parks = append(m.parks, [2]time.Time{start, time.Now()})
		}
		m.mu.Unlock()
		return res, err
	})
}

func (m *mergeMeter) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.work, m.first, m.last, m.peak, m.slotTime, m.merges, m.merged = 0, time.Time{}, time.Time{}, 0, 0, 0, 0
	m.parks = nil
}

// BenchmarkSharedBranch: 50 concurrent promotions (UpdateReleaseRepo + MergePR, each on its
// own file) on one release branch, through the whole prflow (controller, JetStream, two
// workers of 8 slots). Reports successes (must be 50), the wall time of the merge phase
// against the sum of the merges' own durations (ratio; the goal is ≤ 1.3: merges follow each
// other without idle gaps), the peak number of MergePR jobs in worker slots at once and the
// slot-seconds they held beyond their own work (waiting merges should hold none: they park),
// and promotions per minute.
func BenchmarkSharedBranch(b *testing.B) {
	for _, name := range []string{"local", "github"} {
		b.Run(name, func(b *testing.B) { runSharedBranch(b, name) })
	}
}

func runSharedBranch(b *testing.B, name string) {
	t := &testing.T{}
	var fg forge
	for _, f := range forges(t) {
		if f.name == name {
			fg = f
		}
	}
	m := &mergeMeter{Provider: fg.p}
	reg := steps.NewRegistry()
	for _, typ := range steps.Default.Types() {
		d, _ := steps.Default.Lookup(typ)
		dd := *d
		if typ == "MergePR" {
			orig := d.New
			dd.New = func() steps.Step { return m.wrap(orig()) }
		}
		reg.Register(dd)
	}
	e := ctltest.New(b, ctltest.Options{Workers: 2, Concurrency: 8, Registry: reg,
		Services: map[string]any{steps.ServiceSCM: connector.Static{"release": m}},
		Tuning:   queue.ConsumerTuning{AckWait: 10 * time.Second, MaxDeliver: 5}})
	defer e.Stop()
	const n = 50
	b.ResetTimer()
	var wall, work, span, slotExtra time.Duration
	peak, ok, parkedPeak := 0, 0, 0
	var parkedSlot time.Duration
	for i := 0; i < b.N; i++ {
		m.reset()
		start := time.Now()
		ids := make([]string, n)
		for j := range ids {
			ids[j] = e.Start(sharedBranch, map[string]any{"key": fmt.Sprintf("b%d-%d", i, j)}).ID
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				r, err := e.Ctl.Wait(ctx, id, nil)
				if err == nil && r.Status == pipelines.StSucceeded {
					mu.Lock()
					ok++
					mu.Unlock()
				} else if r != nil {
					b.Logf("run %s: %s %s", id, r.Status, r.Error)
				}
			}()
		}
		wg.Wait()
		wall += time.Since(start)
		m.mu.Lock()
		work += m.work
		span += m.last.Sub(m.first)
		slotExtra += m.slotTime - m.work
		peak = max(peak, m.peak)
		pp, ps := m.parkedPeak()
		parkedPeak, parkedSlot = max(parkedPeak, pp), parkedSlot+ps
		m.mu.Unlock()
	}
	b.StopTimer()
	rounds := float64(b.N)
	b.ReportMetric(float64(ok)/rounds, "successes/50")
	b.ReportMetric(wall.Seconds()/rounds, "wall-s")
	b.ReportMetric(work.Seconds()/rounds, "merge-work-s")
	b.ReportMetric(span.Seconds()/work.Seconds(), "merge-span/work")
	b.ReportMetric(float64(peak), "peak-mergepr-slots")
	b.ReportMetric(slotExtra.Seconds()/rounds, "mergepr-slot-s-beyond-work")
	b.ReportMetric(float64(parkedPeak), "peak-slots-of-runs-that-parked")
	b.ReportMetric(parkedSlot.Seconds()/rounds, "slot-s-of-runs-that-parked")
	b.ReportMetric(float64(n)*rounds/wall.Minutes(), "promotions/min")
}
