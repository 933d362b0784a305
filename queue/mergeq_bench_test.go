package queue

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkMergeQueueJoinLeave measures one merge joining the end of a line already q long
// and leaving it again (sequential), and the same with 8 merges joining and leaving at once
// (contended). kv-msgs/op counts the messages the bucket's stream took per join+leave.
func BenchmarkMergeQueueJoinLeave(b *testing.B) {
	for _, depth := range []int{10, 200} {
		for _, par := range []int{1, 8} {
			b.Run(fmt.Sprintf("q=%d/par=%d", depth, par), func(b *testing.B) {
				ctx := context.Background()
				c, q, line := benchLine(b, depth)
				st, _ := c.JS.Stream(ctx, "KV_"+BucketMergeQueue)
				before := st.CachedInfo().State.LastSeq
				if info, err := st.Info(ctx); err == nil {
					before = info.State.LastSeq
				}
				b.ResetTimer()
				var wg sync.WaitGroup
				per := (b.N + par - 1) / par
				for g := range par {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range per {
							id := fmt.Sprintf("b%d-%d/s/m", g, i)
							if _, err := q.Join(ctx, line, id); err != nil {
								b.Error(err)
								return
							}
							if err := q.Leave(ctx, line, id, nil); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				if info, err := st.Info(ctx); err == nil {
					b.ReportMetric(float64(info.State.LastSeq-before)/float64(per*par), "kv-msgs/op")
				}
			})
		}
	}
}

// BenchmarkMergeQueuePoll measures what a parked merge costs each time it polls or is woken
// while q-1 merges wait with it: a Join that finds its entry in the middle of the line.
func BenchmarkMergeQueuePoll(b *testing.B) {
	for _, depth := range []int{10, 200} {
		b.Run(fmt.Sprintf("q=%d", depth), func(b *testing.B) {
			ctx := context.Background()
			_, q, line := benchLine(b, depth)
			mid := fmt.Sprintf("w%03d/s/m", depth/2)
			b.ResetTimer()
			for range b.N {
				p, err := q.Join(ctx, line, mid)
				if err != nil {
					b.Fatal(err)
				}
				if p.Position != depth/2 {
					b.Fatalf("at %d, want %d", p.Position, depth/2)
				}
			}
		})
	}
}

// benchLine opens a merge queue on a fresh embedded server and fills one line with depth
// waiting merges (w000/s/m, w001/s/m, ...).
func benchLine(b *testing.B, depth int) (*Conn, *MergeQueue, string) {
	b.Helper()
	ctx := context.Background()
	c, err := Open(ctx, Options{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	locks, err := c.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketLocks, TTL: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	kv, err := OpenMergeQueue(ctx, c.JS)
	if err != nil {
		b.Fatal(err)
	}
	q := &MergeQueue{KV: kv, Leases: &Leases{KV: locks, Renew: 10 * time.Second}, Grace: time.Hour}
	b.Cleanup(q.Close)
	line := LineKey("gh", "acme/release", "main")
	for i := range depth {
		if _, err := q.Join(ctx, line, fmt.Sprintf("w%03d/s/m", i)); err != nil {
			b.Fatal(err)
		}
	}
	return c, q, line
}
