package controller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/policy"
	"github.com/prflow/prflow/queue"
)

// gatePipeline is a 3-stage promotion (dev → staging → prod): the example stage policy lets
// prod start only while every staging app is Healthy.
const gatePipeline = `
name: promote
environments:
  - name: dev
    clusters: [{name: dev-eu, agent: sim}]
  - name: staging
    clusters: [{name: staging-eu, agent: sim}]
  - name: prod
    clusters: [{name: prod-eu, agent: sim}]
stages:
  - id: dev
    environment: dev
    steps: [{id: deploy, type: Noop}]
  - id: staging
    environment: staging
    steps: [{id: deploy, type: Noop}]
  - id: prod
    environment: prod
    steps: [{id: deploy, type: Noop}]
`

// prodStage is gatePipeline's prod stage.
const prodStage = 2

// gateEnv is an embedded NATS server (on TCP when it must be restarted), an admin connection
// that writes app status records as an agent does, and a controller with the example policies
// whose stage gate for gatePipeline is asked directly.
type gateEnv struct {
	t         testing.TB
	dir, addr string // addr: "" for an in-process server
	srv       *server.Server
	admin     *queue.Conn
	apps      jetstream.KeyValue // prflow-apps through the admin connection
	log       *slog.Logger

	ctl     *Controller
	ctlConn *queue.Conn // the controller's own connection on TCP
	gate    pipelines.StageGate
	run     *pipelines.Run
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// newGateEnv starts the server and the admin connection; the controller starts with start.
func newGateEnv(t testing.TB, tcp bool) *gateEnv {
	t.Helper()
	e := &gateEnv{t: t, dir: t.TempDir(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := context.Background()
	if tcp {
		e.addr = freeTCPAddr(t)
		e.startServer()
		c, err := queue.Open(ctx, queue.Options{URL: "nats://" + e.addr, Name: "agent", Logger: e.log})
		if err != nil {
			t.Fatal(err)
		}
		e.admin = c
	} else {
		c, err := queue.Open(ctx, queue.Options{DataDir: e.dir, Logger: e.log})
		if err != nil {
			t.Fatal(err)
		}
		e.admin, e.srv = c, c.Embedded()
	}
	t.Cleanup(e.close)
	if err := queue.Setup(ctx, e.admin.JS, 1); err != nil {
		t.Fatal(err)
	}
	b, err := queue.OpenBuckets(ctx, e.admin.JS)
	if err != nil {
		t.Fatal(err)
	}
	e.apps = b.Apps
	return e
}

func freeTCPAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startServer (re)starts the TCP server on the same store and address.
func (e *gateEnv) startServer() {
	e.t.Helper()
	var err error
	for range 50 { // the port of a server just shut down may take a moment to be free again
		if e.srv, err = queue.StartEmbedded(e.dir, e.addr); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("embedded NATS on %s: %v", e.addr, err)
}

// restartServer shuts the TCP server down, starts it again and waits until the controller
// reconnected.
func (e *gateEnv) restartServer() {
	e.t.Helper()
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	e.startServer()
	nc := e.ctl.conn.NC
	eventually(e.t, 20*time.Second, func() bool { return nc.Status() == nats.CONNECTED && nc.Stats().Reconnects > 0 },
		func() string { return "controller not reconnected" })
}

// putAfterRestart writes record under key as an agent does once it can write again after a
// server restart, and returns its revision.
func (e *gateEnv) putAfterRestart(key, record string) uint64 {
	e.t.Helper()
	var rev uint64
	eventually(e.t, 20*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var err error
		rev, err = e.apps.Put(ctx, key, []byte(record))
		return err == nil
	}, func() string { return "agent cannot write after the restart" })
	return rev
}

// start runs a controller with the example policies (and opts) and builds the stage gate of
// gatePipeline and a run of it.
func (e *gateEnv) start(opts ...Option) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	conn := e.admin
	if e.addr != "" {
		c, err := queue.Open(ctx, queue.Options{URL: "nats://" + e.addr, Name: "controller", Logger: e.log})
		if err != nil {
			e.t.Fatal(err)
		}
		conn, e.ctlConn = c, c
	}
	pe, err := policy.Open(ctx, filepath.Join("..", "..", "examples", "policies"), e.log)
	if err != nil {
		e.t.Fatal(err)
	}
	reg := testRegistry()
	opts = append([]Option{WithRegistry(reg), WithLogger(e.log), WithPolicy(pe)}, opts...)
	ctl, err := New(ctx, conn, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.ctl = ctl
	e.wg.Go(func() { _ = ctl.Run(ctx) })
	select {
	case <-ctl.Ready():
	case <-time.After(30 * time.Second):
		e.t.Fatal("controller not ready in 30s")
	}
	p, err := pipelines.Load("promote.yaml", []byte(gatePipeline), reg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.gate = ctl.gateFor(p)
	if e.run, err = pipelines.NewRun(p, "r1", nil, "tester", time.Now()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *gateEnv) close() {
	if e.cancel != nil {
		e.cancel()
		e.wg.Wait()
	}
	if e.ctlConn != nil {
		e.ctlConn.Close()
	}
	if e.addr != "" {
		e.admin.Close()
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
		return
	}
	e.admin.Close()
}

// put writes an app status record as the agent does and returns its revision.
func (e *gateEnv) put(name, cluster, health string) uint64 {
	e.t.Helper()
	env := cluster[:len(cluster)-len("-eu")]
	rec := fmt.Sprintf(`{"name":%q,"agent":"sim","cluster":%q,"health":%q,"sync":"Synced","labels":{"harness.io/envRef":%q}}`,
		name, cluster, health, env)
	rev, err := e.apps.Put(context.Background(), "sim."+name, []byte(rec))
	if err != nil {
		e.t.Fatal(err)
	}
	return rev
}

// BenchmarkStageGate measures what a stage start pays for its policy gate: StageAllowed with the
// example policies, 50 app status records in prflow-apps (a third of them staging, all
// Healthy), the prod stage of a 3-stage pipeline; the controller on an in-process embedded
// NATS server as `prflow server` runs by default. Reports the p99.
func BenchmarkStageGate(b *testing.B) {
	e := newGateEnv(b, false)
	for i := range 50 {
		e.put(fmt.Sprintf("web-%d", i), []string{"dev", "staging", "prod"}[i%3]+"-eu", "Healthy")
	}
	e.start()
	if deny, _ := e.gate.StageAllowed(e.run, prodStage); len(deny) > 0 {
		b.Fatalf("prod denied: %v", deny)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		deny, _ := e.gate.StageAllowed(e.run, prodStage)
		lat = append(lat, time.Since(t0))
		if len(deny) > 0 {
			b.Fatalf("prod denied: %v", deny)
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
}
