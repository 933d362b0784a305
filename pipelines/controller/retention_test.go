package controller_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

const (
	quickSrc = "name: quick\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n"
	gateSrc  = `
name: gated
stages:
  - id: prod
    steps:
      - id: approve
        type: Approval
        timeout: 5m
        with: {approvers: {groups: [release], minimumCount: 1}}
`
	soakSrc = "name: soak\nstages:\n  - id: s\n    steps:\n      - {id: w, type: Wait, with: {duration: 10m}}\n"
)

// archived reads the run.archived audit entries, by run.
func archived(t *testing.T, e *ctltest.Env) map[string][]audit.Entry {
	t.Helper()
	l := &audit.Log{JS: e.Conn.JS}
	list, err := l.Query(context.Background(), audit.Filter{Actions: []string{audit.RunArchived}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]audit.Entry{}
	for _, en := range list {
		out[en.Run] = append(out[en.Run], en)
	}
	return out
}

// parkedOn waits until run id has a step parked (waiting).
func parkedOn(t *testing.T, ctl *controller.Controller, id string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if r, err := ctl.Get(context.Background(), id); err == nil && r.Parked() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s never parked", id)
		}
	}
}

// listed is every run id in the controller's runs index.
func listedIDs(t *testing.T, ctl *controller.Controller) []string {
	t.Helper()
	page, err := ctl.ListRuns(context.Background(), controller.ListOptions{Limit: controller.MaxRunsLimit})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range page.Runs {
		ids = append(ids, s.ID)
	}
	return ids
}

// TestRetentionKeepsParkedRuns: a sweep far past every limit archives and deletes the
// finished runs and never a run parked on an approval or a wait, however old; runs that
// ended moments ago stay whatever the count limit; each deleted run's summary is in the
// audit log first, and the runs list drops it.
func TestRetentionKeepsParkedRuns(t *testing.T) {
	t.Parallel()
	e := ctltest.New(t, ctltest.Options{Audit: true})
	ctx := context.Background()
	var done []string
	for range 3 {
		r := e.Start(quickSrc, nil)
		e.Wait(r.ID, 30*time.Second)
		done = append(done, r.ID)
	}
	gated, soak := e.Start(gateSrc, nil), e.Start(soakSrc, nil)
	parkedOn(t, e.Ctl, gated.ID)
	parkedOn(t, e.Ctl, soak.ID)

	// Now: everything ended moments ago, the grace keeps it even beyond a count of 1.
	if n, err := e.Ctl.SweepRuns(ctx, controller.RunRetention{MaxAge: time.Hour, KeepCount: 1}, time.Now()); err != nil || n != 0 {
		t.Fatalf("sweep now: %d deleted, %v; want none (ended within the grace)", n, err)
	}
	// A year on, past keep-days and keep-count.
	later := time.Now().Add(365 * 24 * time.Hour)
	n, err := e.Ctl.SweepRuns(ctx, controller.RunRetention{MaxAge: 24 * time.Hour, KeepCount: 1}, later)
	if err != nil || n != 3 {
		t.Fatalf("sweep a year on: %d deleted, %v; want the 3 finished runs", n, err)
	}
	for _, id := range []string{gated.ID, soak.ID} {
		if r, err := e.Ctl.Get(ctx, id); err != nil || !r.Parked() {
			t.Errorf("parked run %s after the sweep: %v", id, err)
		}
	}
	arch := archived(t, e)
	for _, id := range done {
		if _, err := e.Ctl.Get(ctx, id); !errors.Is(err, controller.ErrNotFound) {
			t.Errorf("finished run %s still stored: %v", id, err)
		}
		if len(arch[id]) != 1 || !strings.Contains(arch[id][0].Detail, "pipeline quick, succeeded, started by tester") ||
			!strings.Contains(arch[id][0].Detail, "1 of 1 stages done") {
			t.Errorf("archive of %s: %+v", id, arch[id])
		}
	}
	if len(arch) != 3 {
		t.Errorf("%d runs archived, want 3: %v", len(arch), arch)
	}
	// The index follows the deletes (through the runs watcher).
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ids := listedIDs(t, e.Ctl)
		if len(ids) == 2 && slices.Contains(ids, gated.ID) && slices.Contains(ids, soak.ID) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs list after the sweep: %v, want only %s and %s", ids, gated.ID, soak.ID)
		}
	}
	// A second sweep finds nothing more to do; limits that make no sense are refused.
	if n, err := e.Ctl.SweepRuns(ctx, controller.RunRetention{MaxAge: 24 * time.Hour}, later); err != nil || n != 0 {
		t.Errorf("second sweep: %d, %v", n, err)
	}
	if _, err := e.Ctl.SweepRuns(ctx, controller.RunRetention{KeepCount: -1}, later); err == nil || !strings.Contains(err.Error(), "keep-count -1 is negative") {
		t.Errorf("negative keep-count: %v", err)
	}
}

// TestRetentionWithoutAuditDeletesNothing: with no audit log to archive to, nothing goes.
func TestRetentionWithoutAuditDeletesNothing(t *testing.T) {
	t.Parallel()
	e := ctltest.New(t, ctltest.Options{})
	r := e.Start(quickSrc, nil)
	e.Wait(r.ID, 30*time.Second)
	n, err := e.Ctl.SweepRuns(context.Background(), controller.RunRetention{MaxAge: time.Hour}, time.Now().Add(48*time.Hour))
	if n != 0 || err == nil || !strings.Contains(err.Error(), "no audit log") {
		t.Fatalf("sweep without an audit log: %d, %v", n, err)
	}
	if _, err := e.Ctl.Get(context.Background(), r.ID); err != nil {
		t.Fatalf("run deleted without an archive: %v", err)
	}
}

// TestRetentionConcurrentSweepsArchiveOnce: two controllers sweep the same runs at the same
// moment; each run is claimed at its revision by one of them, so it is archived once and
// deleted once, and together they delete every finished run.
func TestRetentionConcurrentSweepsArchiveOnce(t *testing.T) {
	t.Parallel()
	e := ctltest.New(t, ctltest.Options{Audit: true})
	second := e.StartReplica(controller.WithAudit(&audit.Log{JS: e.Conn.JS}))
	ctx := context.Background()
	const runs = 24
	var ids []string
	for range runs {
		ids = append(ids, e.Start(quickSrc, nil).ID)
	}
	for _, id := range ids {
		e.Wait(id, 60*time.Second)
	}
	// Both indexes hold every finished run before they sweep.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		p, err := second.ListRuns(ctx, controller.ListOptions{Limit: 500, Status: "succeeded"})
		if err == nil && len(p.Runs) == runs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second controller never indexed the %d finished runs", runs)
		}
	}
	later := time.Now().Add(48 * time.Hour)
	var got [2]int
	var errs [2]error
	start := make(chan struct{})
	var sweeps sync.WaitGroup
	for i, c := range []*controller.Controller{e.Ctl, second} {
		sweeps.Add(1)
		go func() {
			defer sweeps.Done()
			<-start
			got[i], errs[i] = c.SweepRuns(ctx, controller.RunRetention{MaxAge: time.Hour}, later)
		}()
	}
	close(start)
	sweeps.Wait()
	if errs[0] != nil || errs[1] != nil || got[0]+got[1] != runs {
		t.Fatalf("sweeps deleted %d and %d (errors %v, %v), want %d in all", got[0], got[1], errs[0], errs[1], runs)
	}
	arch := archived(t, e)
	for _, id := range ids {
		if len(arch[id]) != 1 {
			t.Errorf("run %s archived %d times", id, len(arch[id]))
		}
		if _, err := e.Ctl.Get(ctx, id); !errors.Is(err, controller.ErrNotFound) {
			t.Errorf("run %s still stored: %v", id, err)
		}
	}
	t.Logf("first controller deleted %d, second %d", got[0], got[1])
}
