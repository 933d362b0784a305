package environments_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/environments"
	"github.com/prflow/prflow/queue"
)

// BenchmarkModelStop: a model is started on NATS, reads what there is, and is stopped. Every
// controller stops its model on shutdown (and every test stack stops a controller), so the
// stop must not wait out the push events' read (it waited up to a second: issue 29 item 9).
func BenchmarkModelStop(b *testing.B) {
	ctx := b.Context()
	log := slog.New(slog.DiscardHandler)
	conn, err := queue.Open(ctx, queue.Options{DataDir: b.TempDir(), Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	if err := queue.Setup(ctx, conn.JS, 1); err != nil {
		b.Fatal(err)
	}
	bk, err := queue.OpenBuckets(ctx, conn.JS)
	if err != nil {
		b.Fatal(err)
	}
	hist, err := queue.OpenEnvHistory(ctx, conn.JS)
	if err != nil {
		b.Fatal(err)
	}
	ac := agent.NewClient(conn.NC, bk.Apps, bk.Agents)
	src := environments.Sources{JS: conn.JS, Runs: bk.Runs, Apps: bk.Apps, Agents: bk.Agents, History: hist, Log: log,
		Pipeline: func(context.Context, string) (*pipelines.Pipeline, error) { return nil, context.Canceled },
		Triggers: func() []*pipelines.Pipeline { return nil }, View: ac.View}
	b.ResetTimer()
	for b.Loop() {
		mctx, cancel := context.WithCancel(ctx)
		m := environments.New(src)
		done := make(chan error, 1)
		go func() { done <- m.Run(mctx) }()
		<-m.Ready()
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}
