package argocd

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/queue"
)

var (
	burstSize  = flag.Int("burst", 10000, "BenchmarkBurstRecorded: apps created in one burst")
	burstEarly = flag.Bool("early", true, "BenchmarkBurstRecorded: re-list early on suspected drops (false: only every --resync)")
	burstEvery = flag.Duration("resync", 5*time.Minute, "BenchmarkBurstRecorded: the agent's resync interval")
)

// BenchmarkBurstRecorded: N apps appear at once on a fake Argo CD with Argo CD's own 1,000-event
// watch buffer, which drops most of the burst's events; the agent (default resync 5m, early
// re-list on) must record all N without a stream cut. Reported: create-s (the fake creating and
// reconciling the apps), recorded-s (from the burst's start until prflow-apps holds all N),
// after-created-s (recorded-s minus create-s: the goal is <= 10), current-s and
// current-after-created-s (until every record is at Argo CD's resourceVersion: a dropped
// MODIFIED leaves a record present but behind), dropped-events, early-relists.
//
//	go test -run '^$' -bench BenchmarkBurstRecorded -benchtime 1x -count 3 ./deploy/argocd -burst 10000
func BenchmarkBurstRecorded(b *testing.B) {
	n := *burstSize
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	git := argocdtest.NewMemGit()
	git.Commit(repoURL, "main", map[string]string{"apps/web/cm.yaml": healthyCM})
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		argo := argocdtest.New(argocdtest.WithGitReader(git), argocdtest.WithTimeline(3*time.Millisecond, 1))
		conn, err := queue.Open(ctx, queue.Options{DataDir: b.TempDir(), Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		if err := queue.Setup(ctx, conn.JS, 1); err != nil {
			b.Fatal(err)
		}
		bk, err := queue.OpenBuckets(ctx, conn.JS)
		if err != nil {
			b.Fatal(err)
		}
		c, err := NewClient(ClientOptions{URL: argo.URL(), Token: argo.Token()})
		if err != nil {
			b.Fatal(err)
		}
		o := Options{AgentID: "eu", Client: c, Resync: *burstEvery, Log: quiet}
		if !*burstEarly {
			o.WatchBuffer = -1
		}
		a, err := New(o)
		if err != nil {
			b.Fatal(err)
		}
		actx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(actx, conn) }()
		for a.Resyncs().Resyncs == 0 { // the first re-list: the stream is up
			time.Sleep(10 * time.Millisecond)
		}
		// Every record's resourceVersion as written, to tell when all are current.
		var mu sync.Mutex
		seen := map[string]int64{}
		kw, err := bk.Apps.Watch(ctx, agent.Token("eu")+".*", jetstream.UpdatesOnly())
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for e := range kw.Updates() {
				if e == nil {
					continue
				}
				var st agent.AppStatus
				if agent.DecodeStatus(e.Value(), &st) != nil {
					continue
				}
				rv, _ := strconv.ParseInt(st.ResourceVersion, 10, 64)
				mu.Lock()
				seen[e.Key()] = max(seen[e.Key()], rv)
				mu.Unlock()
			}
		}()
		apps := make([]argocdtest.Application, n)
		for j := range apps {
			apps[j] = app(fmt.Sprintf("burst-%05d", j), "apps/web", nil)
		}
		b.StartTimer()
		start := time.Now()
		if err := argo.AddApps(apps); err != nil {
			b.Fatal(err)
		}
		created := time.Since(start)
		deadline := time.Now().Add(10 * time.Minute)
		for inventory(ctx, b, bk, "eu") < n {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d records after 10 minutes", inventory(ctx, b, bk, "eu"), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
		recorded := time.Since(start)
		// Current: every record at Argo CD's resourceVersion (a dropped MODIFIED leaves a
		// record present but behind).
		want := map[string]int64{}
		for _, x := range argo.Apps() {
			want[agent.StatusKey("eu", x.Metadata.Name)], _ = strconv.ParseInt(x.Metadata.ResourceVersion, 10, 64)
		}
		behind := func() int {
			mu.Lock()
			defer mu.Unlock()
			k := 0
			for key, rv := range want {
				if seen[key] < rv {
					k++
				}
			}
			return k
		}
		for behind() > 0 {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d records behind Argo CD after 10 minutes", behind(), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
		current := time.Since(start)
		b.StopTimer()
		_ = kw.Stop()
		if a.Connects() != 1 {
			b.Fatalf("the stream was cut (%d connects)", a.Connects())
		}
		b.ReportMetric(created.Seconds(), "create-s")
		b.ReportMetric(recorded.Seconds(), "recorded-s")
		b.ReportMetric((recorded - created).Seconds(), "after-created-s")
		b.ReportMetric(current.Seconds(), "current-s")
		b.ReportMetric((current - created).Seconds(), "current-after-created-s")
		b.ReportMetric(float64(argo.DroppedEvents()), "dropped-events")
		b.ReportMetric(float64(a.Resyncs().Early), "early-relists")
		cancel()
		<-done
		conn.Close()
		argo.Close()
	}
}

// inventory is how many apps the agent's inventory key counts.
func inventory(ctx context.Context, b *testing.B, bk *queue.Buckets, id string) int {
	e, err := bk.Apps.Get(ctx, agent.InventoryKey(id))
	if err != nil {
		return 0
	}
	var inv agent.Inventory
	if err := json.Unmarshal(e.Value(), &inv); err != nil {
		b.Fatal(err)
	}
	return inv.Apps
}
