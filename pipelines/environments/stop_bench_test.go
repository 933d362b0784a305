package environments_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/environments"
	"github.com/prflow/prflow/queue"
)

// modelOnNATS opens an embedded NATS server with prflow's streams and buckets and returns its
// connection and the sources of a model reading them.
func modelOnNATS(tb testing.TB) (*queue.Conn, environments.Sources) {
	tb.Helper()
	ctx := tb.Context()
	log := slog.New(slog.DiscardHandler)
	conn, err := queue.Open(ctx, queue.Options{DataDir: tb.TempDir(), Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(conn.Close)
	if err := queue.Setup(ctx, conn.JS, 1); err != nil {
		tb.Fatal(err)
	}
	bk, err := queue.OpenBuckets(ctx, conn.JS)
	if err != nil {
		tb.Fatal(err)
	}
	hist, err := queue.OpenEnvHistory(ctx, conn.JS)
	if err != nil {
		tb.Fatal(err)
	}
	ac := agent.NewClient(conn.NC, bk.Apps, bk.Agents)
	return conn, environments.Sources{JS: conn.JS, Runs: bk.Runs, Apps: bk.Apps, Agents: bk.Agents, History: hist, Log: log,
		Pipeline: func(context.Context, string) (*pipelines.Pipeline, error) { return nil, context.Canceled },
		Triggers: func() []*pipelines.Pipeline { return nil }, View: ac.View}
}

// runModel starts a model on src and returns once it is ready; cancel stops it and done gets
// what its Run returned.
func runModel(tb testing.TB, src environments.Sources) (context.Context, context.CancelFunc, <-chan error) {
	tb.Helper()
	ctx, cancel := context.WithCancel(tb.Context())
	m := environments.New(src)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	<-m.Ready()
	return ctx, cancel, done
}

// BenchmarkModelStop: a model is started on NATS, reads what there is, and is stopped. Every
// controller stops its model on shutdown (and every test stack stops a controller), so the
// stop must not wait out the push events' read (it waited up to a second: issue 29 item 9).
func BenchmarkModelStop(b *testing.B) {
	_, src := modelOnNATS(b)
	b.ResetTimer()
	for b.Loop() {
		_, cancel, done := runModel(b, src)
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

// The push events are read through one server-side consumer for as long as the model runs:
// reading them with the ordered consumer's own Next made a new consumer on every read, once
// a second while idle.
func TestModelReadsPushesThroughOneConsumer(t *testing.T) {
	t.Parallel()
	conn, src := modelOnNATS(t)
	ctx, cancel, done := runModel(t, src)
	defer cancel()
	consumers := func() []string {
		st, err := conn.JS.Stream(ctx, queue.StreamSCM)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for n := range st.ConsumerNames(ctx).Name() {
			names = append(names, n)
		}
		slices.Sort(names)
		return names
	}
	first := consumers()
	time.Sleep(3 * time.Second) // three idle reads
	if then := consumers(); len(first) != 1 || !slices.Equal(first, then) {
		t.Fatalf("consumers of %s: %v, 3 s later %v; want the same one", queue.StreamSCM, first, then)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A controller whose NATS connection closed before it stopped its model (a shutdown in the
// other order, or a server gone) still stops: the push read's consumer retried its reset on
// the closed connection without end, and the model's Run never returned.
func TestModelStopsAfterItsConnectionClosed(t *testing.T) {
	t.Parallel()
	conn, src := modelOnNATS(t)
	_, cancel, done := runModel(t, src)
	defer cancel()
	conn.NC.Close()
	time.Sleep(2 * time.Second) // the push read fails and tries again on the closed connection
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the model did not stop within a minute of its context ending, its connection closed")
	}
}
