package queue

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// tcpServer is an embedded server on a loopback port that a test can restart on the same
// data directory, with a client connected over TCP.
type tcpServer struct {
	t    *testing.T
	dir  string
	addr string
	mu   sync.Mutex
	srv  *server.Server
}

func newTCPServer(t *testing.T) (*tcpServer, *Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &tcpServer{t: t, dir: t.TempDir(), addr: l.Addr().String()}
	_ = l.Close()
	ts.start()
	t.Cleanup(func() { ts.mu.Lock(); ts.srv.Shutdown(); ts.mu.Unlock() })
	c, err := Open(context.Background(), Options{URL: "nats://" + ts.addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return ts, c
}

func (ts *tcpServer) start() {
	ts.t.Helper()
	var err error
	for i := 0; i < 50; i++ { // the port of a server just shut down may take a moment
		var s *server.Server
		if s, err = StartEmbedded(ts.dir, ts.addr); err == nil {
			ts.mu.Lock()
			ts.srv = s
			ts.mu.Unlock()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	ts.t.Fatal(err)
}

func (ts *tcpServer) stop() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.srv.Shutdown()
	ts.srv.WaitForShutdown()
}

func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitReconnected(t *testing.T, nc *nats.Conn, since uint64) {
	t.Helper()
	waitFor(t, "the client to reconnect", 20*time.Second, func() bool { return nc.IsConnected() && nc.Stats().Reconnects > since })
}

// A slot freed while the server is away asks for a job into the reconnect buffer; the
// request reaches the restarted server, and the puller asks again for the same slot after
// the reconnect. Two requests for one slot: the second job delivered used to be handed back
// at once, a delivery spent without a run. Now the request from before the reconnect goes to
// an inbox nobody listens on any more, and the server drops it unanswered.
func TestPullerRestartDoesNotOverAsk(t *testing.T) {
	ts, c := newTCPServer(t)
	pool(t, c, ConsumerTuning{AckWait: time.Minute}, 1)
	p := puller(t, c.NC, 1, PullerConfig{})
	held := next(t, p, 5*time.Second)
	_ = held.Ack()

	ts.stop()
	waitFor(t, "the client to notice the outage", 10*time.Second, func() bool { return !c.NC.IsConnected() })
	before := c.NC.Stats().Reconnects
	p.Release() // its pull request waits in the reconnect buffer
	ts.start()
	waitReconnected(t, c.NC, before)

	// Once JetStream is back, two jobs: one for the slot; the other must stay on the server,
	// not be delivered and handed back.
	waitFor(t, "JetStream after the restart", 20*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.JS.AccountInfo(ctx)
		return err == nil
	})
	publishJobs(t, c.JS, 1, 2)
	m := next(t, p, 10*time.Second)
	time.Sleep(500 * time.Millisecond) // room for a second delivery to show up
	info := poolInfo(t, c)
	if info.NumRedelivered != 0 || info.Delivered.Consumer != 2 {
		t.Fatalf("one slot, one job taken: %d deliveries, %d redelivered jobs (want 2 deliveries in all, none redelivered)",
			info.Delivered.Consumer, info.NumRedelivered)
	}
	_ = m.Ack()
	p.Release()
	m = next(t, p, 10*time.Second)
	if m.Delivered() != 1 {
		t.Fatalf("second job delivered %d times before it ran, want 1", m.Delivered())
	}
}

// Reconnects that leave pull requests alive on the server (a network blip: the server keeps
// a waiting request and honours it again once the inbox is subscribed anew) used to pile up
// more requests than slots; a job beyond the slots bounced between deliveries and immediate
// hand-backs until MaxDeliver dead-lettered it without ever running. Every job must run once
// a slot frees, on its first delivery.
func TestPullerReconnectsDoNotBurnDeliveries(t *testing.T) {
	_, c := newTCPServer(t)
	pool(t, c, ConsumerTuning{AckWait: time.Minute, MaxDeliver: 5}, 0)
	p := puller(t, c.NC, 2, PullerConfig{})
	waitFor(t, "the first pull request", 5*time.Second, func() bool { return poolInfo(t, c).NumWaiting >= 1 })
	for i := 0; i < 6; i++ {
		before := c.NC.Stats().Reconnects
		if err := c.NC.ForceReconnect(); err != nil {
			t.Fatal(err)
		}
		waitReconnected(t, c.NC, before)
		time.Sleep(50 * time.Millisecond)
	}
	publishJobs(t, c.JS, 0, 4)
	a, b := next(t, p, 5*time.Second), next(t, p, 5*time.Second)
	time.Sleep(time.Second) // both slots busy: jobs 3 and 4 must wait on the server
	if info := poolInfo(t, c); info.Delivered.Consumer != 2 {
		t.Errorf("2 slots busy, %d deliveries (want 2): jobs delivered to a worker that cannot run them", info.Delivered.Consumer)
	}
	for _, m := range []*Msg{a, b} {
		_ = m.Ack()
		p.Release()
	}
	for i := 0; i < 2; i++ {
		m := next(t, p, 10*time.Second)
		if m.Delivered() != 1 {
			t.Errorf("job %s ran on delivery %d, want 1", m.Data(), m.Delivered())
		}
		_ = m.Ack()
		p.Release()
	}
}
