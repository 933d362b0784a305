package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/queue"
)

// LogLine is one published step log line (PRFLOW_LOGS).
type LogLine struct {
	Time  time.Time         `json:"time"`
	Level string            `json:"level"`
	Msg   string            `json:"msg"`
	Attrs map[string]string `json:"attrs,omitempty"`
	Run   string            `json:"run"`
	Stage string            `json:"stage"`
	Step  string            `json:"step"`
}

// publishHandler publishes a step's log lines asynchronously; Flush waits for them, so the
// lines are stored before the step's result is.
type publishHandler struct {
	js      jetstream.JetStream
	subject string
	run     string
	stage   string
	step    string
	attrs   []slog.Attr
	mu      *sync.Mutex
	futures *[]jetstream.PubAckFuture
}

func newPublishHandler(js jetstream.JetStream, run, stage, step string) *publishHandler {
	return &publishHandler{js: js, subject: queue.LogSubject(run, stage, step), run: run, stage: stage, step: step,
		mu: &sync.Mutex{}, futures: &[]jetstream.PubAckFuture{}}
}

func (h *publishHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *publishHandler) Handle(_ context.Context, r slog.Record) error {
	line := LogLine{Time: r.Time, Level: r.Level.String(), Msg: r.Message, Run: h.run, Stage: h.stage, Step: h.step}
	add := func(a slog.Attr) bool {
		if line.Attrs == nil {
			line.Attrs = map[string]string{}
		}
		line.Attrs[a.Key] = a.Value.String()
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	b, _ := json.Marshal(line)
	f, err := h.js.PublishAsync(h.subject, b)
	if err != nil {
		return err
	}
	h.mu.Lock()
	*h.futures = append(*h.futures, f)
	h.mu.Unlock()
	return nil
}

func (h *publishHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr{}, h.attrs...), as...)
	return &c
}

func (h *publishHandler) WithGroup(string) slog.Handler { return h }

// Flush waits until every published line is stored (or ctx ends).
func (h *publishHandler) Flush(ctx context.Context) {
	h.mu.Lock()
	fs := *h.futures
	*h.futures = nil
	h.mu.Unlock()
	for _, f := range fs {
		select {
		case <-f.Ok():
		case <-f.Err():
		case <-ctx.Done():
			return
		}
	}
}
