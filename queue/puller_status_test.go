package queue

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// records keeps the log records a puller writes.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// line returns the first record with attribute reason=reason.
func (r *records) line(reason string) (slog.Record, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.recs {
		found := false
		rec.Attrs(func(a slog.Attr) bool {
			found = a.Key == "reason" && a.Value.String() == reason
			return !found
		})
		if found {
			return rec, true
		}
	}
	return slog.Record{}, false
}

// inject sends p a status reply on its current inbox, as the server (or a proxy) would.
func inject(t *testing.T, c *Conn, p *Puller, code, desc string) {
	t.Helper()
	p.mu.Lock()
	inbox := p.inbox
	p.mu.Unlock()
	m := nats.NewMsg(inbox)
	m.Header.Set("Status", code)
	m.Header.Set("Description", desc)
	if err := c.NC.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
}

// poolWith creates the pool consumer with extra settings (the topology's own plus mod).
func poolWith(t *testing.T, c *Conn, mod func(*jetstream.ConsumerConfig)) {
	t.Helper()
	ctx := context.Background()
	if err := Setup(ctx, c.JS, 1); err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.ConsumerConfig{Durable: PoolConsumerName("p"), FilterSubject: JobSubject("p"), AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 30 * time.Second, MaxDeliver: 5}
	mod(&cfg)
	if _, err := c.JS.CreateOrUpdateConsumer(ctx, StreamJobs, cfg); err != nil {
		t.Fatal(err)
	}
}

func recreatePool(c *Conn) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := PoolConsumer(ctx, c.JS, "p", ConsumerTuning{})
		return err
	}
}

// Every status the server can answer a pull request with is handled on purpose: counted
// (prflow_puller_status_total{status,reason}), logged with its reason, and followed by the
// right move. A worker keeps pulling after the transient ones, recreates (or reports) a
// deleted consumer instead of asking it again forever, and stops with ErrConsumerGone on a
// consumer it can never pull from. Statuses a single embedded server cannot be made to send
// (a leader change, a malformed request, codes this puller does not know) are injected on the
// puller's inbox as a proxy would.
func TestPullerStatuses(t *testing.T) {
	const (
		pulls = "pulls" // a job published afterwards still reaches the puller
		gone  = "gone"  // Next returns ErrConsumerGone
	)
	cases := []struct {
		name         string
		code, reason string     // no code: reason is a reset's (prflow_puller_resets_total)
		level        slog.Level // of its log line
		slots        int
		cfg          func(c *Conn) PullerConfig
		setup        func(t *testing.T, c *Conn) // default: the pool consumer, no jobs
		trigger      func(t *testing.T, c *Conn, p *Puller)
		want         string
		recreated    bool
	}{
		{name: "idle heartbeat", code: "100", reason: stIdleHeartbeat, level: slog.LevelDebug, want: pulls,
			cfg: func(*Conn) PullerConfig {
				return PullerConfig{Heartbeat: 50 * time.Millisecond, Expires: 2 * time.Second}
			},
			trigger: func(*testing.T, *Conn, *Puller) { time.Sleep(300 * time.Millisecond) }},
		{name: "request timeout", code: "408", reason: stRequestTimeout, level: slog.LevelDebug, want: pulls,
			cfg: func(*Conn) PullerConfig {
				return PullerConfig{Heartbeat: 50 * time.Millisecond, Expires: 200 * time.Millisecond}
			},
			trigger: func(*testing.T, *Conn, *Puller) { time.Sleep(600 * time.Millisecond) }},
		{name: "no messages", code: "404", reason: stNoMessages, level: slog.LevelDebug, want: pulls,
			trigger: func(t *testing.T, c *Conn, p *Puller) { inject(t, c, p, "404", "No Messages") }},
		{name: "consumer deleted, recreated", code: "409", reason: stConsumerDeleted, level: slog.LevelError, want: pulls, recreated: true,
			cfg: func(c *Conn) PullerConfig { return PullerConfig{Recreate: recreatePool(c)} },
			trigger: func(t *testing.T, c *Conn, p *Puller) {
				waitFor(t, "a waiting request", 5*time.Second, func() bool { return poolInfo(t, c).NumWaiting > 0 })
				if err := c.JS.DeleteConsumer(context.Background(), StreamJobs, PoolConsumerName("p")); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "consumer deleted, no recreate", code: "409", reason: stConsumerDeleted, level: slog.LevelError, want: gone,
			trigger: func(t *testing.T, c *Conn, p *Puller) {
				waitFor(t, "a waiting request", 5*time.Second, func() bool { return poolInfo(t, c).NumWaiting > 0 })
				if err := c.JS.DeleteConsumer(context.Background(), StreamJobs, PoolConsumerName("p")); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "no responders: consumer deleted with no request waiting", code: "503", reason: stNoResponders, level: slog.LevelWarn,
			want: pulls, recreated: true, slots: 1,
			cfg: func(c *Conn) PullerConfig { return PullerConfig{Recreate: recreatePool(c)} },
			trigger: func(t *testing.T, c *Conn, p *Puller) {
				publishJobs(t, c.JS, 100, 1)
				m := next(t, p, 5*time.Second) // the one slot busy: no request open
				_ = m.Ack()
				if err := c.JS.DeleteConsumer(context.Background(), StreamJobs, PoolConsumerName("p")); err != nil {
					t.Fatal(err)
				}
				p.Release() // its request finds no consumer
			}},
		{name: "no responders, consumer there (JetStream still starting)", code: "503", reason: stNoResponders, level: slog.LevelWarn, want: pulls,
			trigger: func(t *testing.T, c *Conn, p *Puller) { inject(t, c, p, "503", "") }},
		{name: "leadership change", code: "409", reason: stLeadershipChange, level: slog.LevelInfo, want: pulls,
			trigger: func(t *testing.T, c *Conn, p *Puller) { inject(t, c, p, "409", "Leadership Change") }},
		{name: "max waiting", code: "409", reason: stMaxWaiting, level: slog.LevelWarn, want: pulls,
			trigger: func(t *testing.T, c *Conn, p *Puller) { inject(t, c, p, "409", "Exceeded MaxWaiting") }},
		// A server answers "Exceeded MaxWaiting" only to requests without heartbeats; ours
		// have them, so it stays silent and the missing heartbeats make the puller ask again.
		{name: "max waiting, silent", reason: "heartbeats_missed", level: slog.LevelWarn, want: pulls,
			cfg: func(*Conn) PullerConfig {
				return PullerConfig{Heartbeat: 100 * time.Millisecond, Expires: 2 * time.Second}
			},
			setup: func(t *testing.T, c *Conn) {
				poolWith(t, c, func(cfg *jetstream.ConsumerConfig) { cfg.MaxWaiting = 1 })
				other := puller(t, c.NC, 1, PullerConfig{}) // holds the only waiting request
				waitFor(t, "the other worker's request", 5*time.Second, func() bool { return poolInfo(t, c).NumWaiting == 1 })
				time.AfterFunc(time.Second, other.Stop) // then frees it
			},
			trigger: func(*testing.T, *Conn, *Puller) {}},
		{name: "max request batch", code: "409", reason: stMaxRequestBatch, level: slog.LevelWarn, want: pulls, slots: 3,
			setup: func(t *testing.T, c *Conn) {
				poolWith(t, c, func(cfg *jetstream.ConsumerConfig) { cfg.MaxRequestBatch = 1 })
			},
			trigger: func(*testing.T, *Conn, *Puller) {}},
		{name: "max request expires", code: "409", reason: stMaxRequestExpires, level: slog.LevelWarn, want: pulls,
			setup: func(t *testing.T, c *Conn) {
				poolWith(t, c, func(cfg *jetstream.ConsumerConfig) { cfg.MaxRequestExpires = time.Second })
			},
			trigger: func(*testing.T, *Conn, *Puller) {}},
		{name: "max bytes", code: "409", reason: stMaxBytes, level: slog.LevelWarn, want: pulls,
			trigger: func(t *testing.T, c *Conn, p *Puller) { inject(t, c, p, "409", "Message Size Exceeds MaxBytes") }},
		{name: "unknown 409", code: "409", reason: stOther409, level: slog.LevelWarn, want: pulls,
			trigger: func(t *testing.T, c *Conn, p *Puller) { inject(t, c, p, "409", "Something New") }},
		{name: "bad request", code: "400", reason: stBadRequest, level: slog.LevelError, want: pulls,
			trigger: func(t *testing.T, c *Conn, p *Puller) { inject(t, c, p, "400", "Bad Request - invalid json") }},
		{name: "unknown code", code: "418", reason: stUnknown, level: slog.LevelWarn, want: pulls,
			trigger: func(t *testing.T, c *Conn, p *Puller) { inject(t, c, p, "418", "Teapot") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each case has its own server; most of its time is waiting for one
			c := open(t)
			if tc.setup != nil {
				tc.setup(t, c)
			} else {
				pool(t, c, ConsumerTuning{}, 0)
			}
			var cfg PullerConfig
			if tc.cfg != nil {
				cfg = tc.cfg(c)
			}
			recs := &records{}
			cfg.Log = slog.New(recs)
			m, err := NewPullerMetrics(nil)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Metrics = m
			slots := tc.slots
			if slots == 0 {
				slots = 2
			}
			p := puller(t, c.NC, slots, cfg)
			tc.trigger(t, c, p)
			cons := PoolConsumerName("p")
			if tc.code != "" {
				waitFor(t, "the status to be counted", 10*time.Second, func() bool { return m.Status(cons, tc.code, tc.reason) > 0 })
			} else {
				waitFor(t, "the reset to be counted", 10*time.Second, func() bool { return m.Resets(cons, tc.reason) > 0 })
			}
			waitFor(t, "its log line", 5*time.Second, func() bool { _, ok := recs.line(tc.reason); return ok })
			if rec, _ := recs.line(tc.reason); rec.Level != tc.level {
				t.Errorf("log line %q at %s, want %s", rec.Message, rec.Level, tc.level)
			}
			switch tc.want {
			case pulls:
				n := max(tc.slots, 1)
				publishJobs(t, c.JS, 0, n)
				for range n {
					next(t, p, 10*time.Second)
				}
			case gone:
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := p.Next(ctx); !errors.Is(err, ErrConsumerGone) {
					t.Fatalf("Next = %v, want ErrConsumerGone", err)
				}
			}
			if got := m.Recreated(cons); tc.recreated != (got > 0) {
				t.Errorf("consumer recreated %v times (want recreated: %v)", got, tc.recreated)
			}
		})
	}
}

// A puller on a push consumer can never get a job: Next says so instead of waiting forever.
func TestPullerOnPushConsumerFails(t *testing.T) {
	c := open(t)
	ctx := context.Background()
	if _, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "PUSHED", Subjects: []string{"pushed.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.JS.CreateOrUpdatePushConsumer(ctx, "PUSHED", jetstream.ConsumerConfig{Durable: "pc", DeliverSubject: "pushed-here",
		AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	recs := &records{}
	m, _ := NewPullerMetrics(nil)
	p, err := NewPuller(c.NC, "PUSHED", "pc", 1, PullerConfig{Log: slog.New(recs), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := p.Next(nctx); !errors.Is(err, ErrConsumerGone) {
		t.Fatalf("Next = %v, want ErrConsumerGone", err)
	}
	if m.Status("pc", "409", stPushConsumer) == 0 {
		t.Error("push-consumer status not counted")
	}
	if rec, ok := recs.line(stPushConsumer); !ok || rec.Level != slog.LevelError {
		t.Errorf("no error line for it: %v", rec)
	}
}
