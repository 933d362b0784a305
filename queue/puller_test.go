package queue

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// pool sets up the jobs stream and a pool consumer on c and publishes n jobs to it.
func pool(t *testing.T, c *Conn, tuning ConsumerTuning, n int) {
	t.Helper()
	ctx := context.Background()
	if err := Setup(ctx, c.JS, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := PoolConsumer(ctx, c.JS, "p", tuning); err != nil {
		t.Fatal(err)
	}
	publishJobs(t, c.JS, 0, n)
}

func publishJobs(t *testing.T, js jetstream.JetStream, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if _, err := js.Publish(context.Background(), JobSubject("p"), fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
}

func puller(t *testing.T, nc *nats.Conn, slots int, cfg PullerConfig) *Puller {
	t.Helper()
	p, err := NewPuller(nc, StreamJobs, PoolConsumerName("p"), slots, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

func next(t *testing.T, p *Puller, within time.Duration) *Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	m, err := p.Next(ctx)
	if err != nil {
		t.Fatalf("no job within %s: %v", within, err)
	}
	return m
}

// poolInfo is the server's view of the pool consumer.
func poolInfo(t *testing.T, c *Conn) *jetstream.ConsumerInfo {
	t.Helper()
	cons, err := c.JS.Consumer(context.Background(), StreamJobs, PoolConsumerName("p"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func ackPending(t *testing.T, c *Conn) int { return poolInfo(t, c).NumAckPending }

// A busy worker holds no job beyond its slots: the rest stay on the server, where a second
// worker with free slots gets them.
func TestPullerAsksForNoMoreThanFreeSlots(t *testing.T) {
	c := open(t)
	pool(t, c, ConsumerTuning{}, 10)
	busy := puller(t, c.NC, 3, PullerConfig{})
	var held []*Msg
	for i := 0; i < 3; i++ {
		held = append(held, next(t, busy, 5*time.Second))
	}
	time.Sleep(200 * time.Millisecond) // room for any extra delivery to show up
	if n := ackPending(t, c); n != 3 {
		t.Fatalf("%d jobs out with 3 slots busy, want 3", n)
	}
	other := puller(t, c.NC, 7, PullerConfig{})
	for i := 0; i < 7; i++ {
		m := next(t, other, 5*time.Second)
		_ = m.Ack()
		other.Release()
	}
	// Freeing a slot of the busy worker lets exactly one more job in. (The other worker stops
	// first: a job on its way to a worker that stops just then is redelivered only after
	// AckWait, as with nats.go's own iterators.)
	other.Stop()
	publishJobs(t, c.JS, 10, 5)
	_ = held[0].Ack()
	busy.Release()
	next(t, busy, 5*time.Second)
	time.Sleep(200 * time.Millisecond)
	if n := ackPending(t, c); n != 3 {
		t.Fatalf("%d jobs out after one slot was freed and refilled, want 3", n)
	}
}

// Slots freed close together share one pull request.
func TestPullerBatchesPullRequests(t *testing.T) {
	c := open(t)
	const jobs = 640
	pool(t, c, ConsumerTuning{}, jobs)
	p := puller(t, c.NC, 64, PullerConfig{})
	for i := 0; i < jobs; i++ {
		m := next(t, p, 5*time.Second)
		_ = m.Ack()
		p.Release()
	}
	if n := p.PullRequests(); n > jobs/4 {
		t.Fatalf("%d pull requests for %d jobs: not batched", n, jobs)
	}
	t.Logf("%d pull requests for %d jobs", p.PullRequests(), jobs)
}

// Requests that expire on the server are made again, so an idle worker still gets work.
func TestPullerRenewsExpiredRequests(t *testing.T) {
	c := open(t)
	pool(t, c, ConsumerTuning{}, 0)
	p := puller(t, c.NC, 2, PullerConfig{Expires: 200 * time.Millisecond, Heartbeat: 50 * time.Millisecond})
	time.Sleep(700 * time.Millisecond)
	if n := p.PullRequests(); n < 3 {
		t.Fatalf("%d pull requests in 700ms with 200ms expiry: expired requests not renewed", n)
	}
	publishJobs(t, c.JS, 0, 1)
	next(t, p, 2*time.Second)
}

// Stop hands back jobs that reached the worker but no slot, instead of leaving them to time
// out (AckWait here is a minute; the second worker gets the job at once).
func TestPullerStopHandsJobsBack(t *testing.T) {
	c := open(t)
	pool(t, c, ConsumerTuning{AckWait: time.Minute}, 0)
	first := puller(t, c.NC, 2, PullerConfig{})
	time.Sleep(100 * time.Millisecond) // its request is waiting on the server
	publishJobs(t, c.JS, 0, 1)
	deadline := time.Now().Add(5 * time.Second)
	for ackPending(t, c) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("job never reached the first worker")
		}
		time.Sleep(10 * time.Millisecond)
	}
	first.Stop()
	if _, err := first.Next(context.Background()); err != ErrPullerStopped {
		t.Fatalf("Next after Stop: %v", err)
	}
	second := puller(t, c.NC, 1, PullerConfig{})
	m := next(t, second, 5*time.Second)
	if m.Delivered() != 2 {
		t.Fatalf("delivered %d times, want 2 (handed back once)", m.Delivered())
	}
}

// A deleted consumer, recreated by someone else and by the puller at the same time (the
// server answers 409, then maybe 503), and a restarted server (the client reconnects; the
// server forgot the requests) both leave the worker pulling.
func TestPullerSurvivesConsumerRecreateAndServerRestart(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	s, err := StartEmbedded(dir, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown() })
	c, err := Open(context.Background(), Options{URL: "nats://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	pool(t, c, ConsumerTuning{}, 0)
	recreate := func(ctx context.Context) error {
		_, err := PoolConsumer(ctx, c.JS, "p", ConsumerTuning{})
		return err
	}
	p := puller(t, c.NC, 2, PullerConfig{Heartbeat: 100 * time.Millisecond, Expires: 2 * time.Second, Recreate: recreate})
	time.Sleep(100 * time.Millisecond)

	ctx := context.Background()
	if err := c.JS.DeleteConsumer(ctx, StreamJobs, PoolConsumerName("p")); err != nil {
		t.Fatal(err)
	}
	if _, err := PoolConsumer(ctx, c.JS, "p", ConsumerTuning{}); err != nil {
		t.Fatal(err)
	}
	publishJobs(t, c.JS, 0, 1)
	m := next(t, p, 5*time.Second)
	_ = m.Ack()
	p.Release()

	s.Shutdown()
	s.WaitForShutdown()
	if s, err = StartEmbedded(dir, addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown() })
	deadline := time.Now().Add(10 * time.Second)
	for !c.NC.IsConnected() {
		if time.Now().After(deadline) {
			t.Fatal("client did not reconnect")
		}
		time.Sleep(20 * time.Millisecond)
	}
	publishJobs(t, c.JS, 1, 1)
	next(t, p, 5*time.Second)
}

// Jobs trickling in one at a time do not pile up open pull requests on the server (it keeps
// a bounded number per consumer, 512 by default, shared by all workers of a pool).
func TestPullerKeepsFewRequestsOpen(t *testing.T) {
	c := open(t)
	pool(t, c, ConsumerTuning{}, 0)
	p := puller(t, c.NC, 64, PullerConfig{})
	for i := 0; i < 100; i++ {
		publishJobs(t, c.JS, i, 1)
		m := next(t, p, 5*time.Second)
		_ = m.Ack()
		p.Release()
		time.Sleep(3 * time.Millisecond) // past Linger: each freed slot on its own
	}
	time.Sleep(50 * time.Millisecond)
	info := poolInfo(t, c)
	if info.NumWaiting > 64/8+1 {
		t.Fatalf("%d pull requests open for 64 slots", info.NumWaiting)
	}
	t.Logf("%d pull requests open, %d sent for 100 jobs", info.NumWaiting, p.PullRequests())
}
