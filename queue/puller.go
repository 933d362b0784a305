package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrPullerStopped is returned by Puller.Next once Stop was called.
var ErrPullerStopped = errors.New("puller stopped")

// ErrConsumerGone is returned by Puller.Next when the consumer was deleted and the puller has
// no way to create it again (PullerConfig.Recreate is nil), or the consumer cannot serve pull
// requests at all (it is a push consumer).
var ErrConsumerGone = errors.New("consumer gone")

// HandBackDelay is how long a job handed back unrun (a delivery beyond the free slots, a job
// not started when the worker stops) waits before its redelivery. Never at once: a job
// bouncing between immediate hand-backs spends its MaxDeliver deliveries in a second or two
// without ever running (issue 32, item 8).
const HandBackDelay = time.Second

// Puller hands a pool consumer's jobs to a fixed number of worker slots.
//
// It asks the server for at most as many messages as there are free slots, so a job never
// waits in a client buffer, its AckWait running, while this worker's slots are busy and
// another worker idles. And it asks for several freed slots in one pull request instead of
// one request per job, which under load took a server message and two JSON documents per
// step. nats.go's jetstream API offers one or the other: Consume/Messages pre-buffer (with
// PullMaxMessages(1) each iterator still holds one job it cannot start; one iterator per slot
// is a subscription and a request per job), and Fetch makes a subscription per call. So this
// speaks JetStream's pull protocol (a request on $JS.API.CONSUMER.MSG.NEXT, messages and
// status replies on one inbox) itself. Measured (issue 32 item 9, BenchmarkFullPath, 3 runs
// each on a 2-core machine at load 27-37, where rates overlap run to run): a Fetch(1) loop per
// slot cost 7.1-7.2 server messages in per step against 5.4-5.5 here (a request per job
// instead of shared ones), and no less CPU per step (median 1314 µs against 1193 µs); one
// Messages(PullMaxMessages(1)) iterator shared by the slots stalled (3 s of CPU in 5 minutes,
// killed) besides holding a job it could not start.
//
// Requests are made in generations, each with its own inbox. Whenever the puller can no
// longer account for the requests it made (a reconnect, missed heartbeats, a request the
// server refused without saying how many messages it still owed), it starts a new generation
// and drops the old inbox: the server discards a waiting request whose inbox has no
// subscriber instead of delivering to it, so requests from before can never add up to more
// jobs than free slots.
type Puller struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	stream   string
	consumer string
	api      string
	out      chan *nats.Msg
	cfg      PullerConfig
	status   chan nats.Status
	log      *slog.Logger
	metrics  *PullerMetrics

	mu        sync.Mutex
	gen       uint64 // the current request generation
	genConn   uint64 // the connection's reconnect count when this generation began
	sub       *nats.Subscription
	inbox     string
	free      int // slots holding no job (a job in out holds its slot)
	asked     int // messages requested in this generation and neither delivered nor expired
	maxBatch  int // the consumer's MaxRequestBatch, once the server told it (0: none)
	expires   time.Duration
	timer     *time.Timer
	lastSeen  time.Time // last message or status of this generation from the server
	holdUntil time.Time // no request before then (backing off after an error status)
	retry     *time.Timer
	fails     int  // consecutive error statuses, for the backoff
	checking  bool // a consumer check or recreate is under way
	err       error
	failed    chan struct{}
	logged    map[string]logMark // rate limit of repeated log lines, by reason

	stopped atomic.Bool
	done    chan struct{}
	pulls   atomic.Int64
}

// PullerConfig tunes a Puller. Zero values take the defaults.
type PullerConfig struct {
	// MinBatch is how many freed slots wait for each other before a pull request goes out;
	// default slots/8 (at least 1). Linger bounds the wait; default 1ms.
	MinBatch int
	Linger   time.Duration
	// Expires is a pull request's lifetime on the server (default 30s); Heartbeat how often
	// the server shows it is alive while a request waits (default 5s). Two missed
	// heartbeats and the requests are taken as lost and made again.
	Expires, Heartbeat time.Duration
	// Recreate creates the consumer again after it was deleted. Nil: Next returns
	// ErrConsumerGone instead.
	Recreate func(ctx context.Context) error
	// Log gets a line for every status the server answers a pull request with other than
	// the normal ones (repeated lines at most every LogEvery, default 10s). Nil: slog.Default.
	Log      *slog.Logger
	LogEvery time.Duration
	// Metrics counts statuses, resets, hand-backs and recreations. Nil: not counted.
	Metrics *PullerMetrics
}

// NewPuller starts pulling from a durable pull consumer for slots worker slots.
func NewPuller(nc *nats.Conn, stream, consumer string, slots int, cfg PullerConfig) (*Puller, error) {
	if slots < 1 {
		slots = 1
	}
	if cfg.MinBatch <= 0 {
		cfg.MinBatch = max(1, slots/8)
	}
	if cfg.Linger <= 0 {
		cfg.Linger = time.Millisecond
	}
	if cfg.Expires <= 0 {
		cfg.Expires = 30 * time.Second
	}
	if cfg.Heartbeat <= 0 || cfg.Heartbeat*2 > cfg.Expires {
		cfg.Heartbeat = min(5*time.Second, cfg.Expires/2)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.LogEvery <= 0 {
		cfg.LogEvery = 10 * time.Second
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	p := &Puller{nc: nc, js: js, stream: stream, consumer: consumer, api: "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + consumer,
		out: make(chan *nats.Msg, slots), cfg: cfg, free: slots, expires: cfg.Expires, lastSeen: time.Now(),
		done: make(chan struct{}), failed: make(chan struct{}), logged: map[string]logMark{},
		log: cfg.Log.With("stream", stream, "consumer", consumer), metrics: cfg.Metrics}
	p.mu.Lock()
	err = p.newGeneration()
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	p.status = nc.StatusChanged(nats.CONNECTED)
	go p.watch()
	p.pull(true)
	return p, nil
}

// Next returns the next job for a free slot. The caller calls Release when the slot is free
// again. After Stop it returns ErrPullerStopped; when the consumer is gone for good, an error
// wrapping ErrConsumerGone.
func (p *Puller) Next(ctx context.Context) (*Msg, error) {
	select {
	case m := <-p.out:
		if p.stopped.Load() {
			p.handBack(m, "stopped")
			return nil, ErrPullerStopped
		}
		return &Msg{m: m}, nil
	case <-p.done:
		return nil, ErrPullerStopped
	case <-p.failed:
		p.mu.Lock()
		defer p.mu.Unlock()
		return nil, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Release gives a slot back: the puller may ask for a job for it.
func (p *Puller) Release() {
	p.mu.Lock()
	p.free++
	p.mu.Unlock()
	p.pull(false)
}

// PullRequests is how many pull requests were sent (batching shows in it).
func (p *Puller) PullRequests() int64 { return p.pulls.Load() }

// Stop stops asking for jobs. Jobs that arrive afterwards, or wait in no slot yet, are
// handed back for redelivery (to this or another worker) after HandBackDelay, not left to
// time out. Only a job the server sends in the very instant the subscription ends is lost to
// this worker and redelivered after AckWait, as with nats.go's own iterators.
func (p *Puller) Stop() {
	if p.stopped.Swap(true) {
		return
	}
	close(p.done)
	p.mu.Lock()
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.retry != nil {
		p.retry.Stop()
	}
	sub := p.sub
	p.mu.Unlock()
	p.nc.RemoveStatusListener(p.status)
	// Drain: the server forgets our pull requests, and what it sent before reaches onMsg.
	if err := sub.Drain(); err == nil {
		for deadline := time.Now().Add(5 * time.Second); sub.IsValid() && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	for {
		select {
		case m := <-p.out:
			p.handBack(m, "stopped")
		default:
			return
		}
	}
}

// handBack returns a job this worker will not run to the server, for redelivery after
// HandBackDelay. It still counts as a delivery (JetStream counts every one): the puller's
// exact requests keep these rare.
func (p *Puller) handBack(m *nats.Msg, reason string) {
	p.metrics.handedBack(p.consumer, reason)
	if reason != "stopped" {
		p.logf(slog.LevelWarn, reason, "job delivered with no free slot; handed back", "retryIn", HandBackDelay.String())
	}
	_ = m.NakWithDelay(HandBackDelay)
}

// newGeneration starts a request generation on a fresh inbox and drops the old one (see
// Puller). p.mu held.
func (p *Puller) newGeneration() error {
	if p.stopped.Load() && p.sub != nil {
		return nil // Stop drains the current inbox; no new one
	}
	conn := p.nc.Stats().Reconnects
	inbox := p.nc.NewInbox()
	gen := p.gen + 1
	sub, err := p.nc.Subscribe(inbox, func(m *nats.Msg) { p.onMsg(gen, m) })
	if err != nil {
		return fmt.Errorf("pull consumer %s: subscribe %s: %w", p.consumer, inbox, err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if old := p.sub; old != nil {
		// Messages it already holds still reach onMsg, as jobs of an old generation.
		_ = old.Drain()
	}
	p.sub, p.inbox, p.gen, p.genConn, p.asked, p.lastSeen = sub, inbox, gen, conn, 0, time.Now()
	return nil
}

// reset starts a new generation and asks for every free slot again (after delay when
// backing off). reason names it in the metrics.
func (p *Puller) reset(reason string, delay time.Duration) {
	if p.stopped.Load() {
		return
	}
	p.metrics.reset(p.consumer, reason)
	p.mu.Lock()
	if err := p.newGeneration(); err != nil {
		p.mu.Unlock()
		p.logf(slog.LevelWarn, "subscribe", "cannot start a new pull inbox; trying again", "err", err)
		p.after(time.Second)
		return
	}
	p.mu.Unlock()
	if delay > 0 {
		p.after(delay)
		return
	}
	p.pull(true)
}

// after holds requests back for d, then asks for every free slot.
func (p *Puller) after(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdUntil = time.Now().Add(d)
	if p.retry != nil {
		p.retry.Stop()
	}
	p.retry = time.AfterFunc(d, func() { p.pull(true) })
}

// backoff is the next pause after an error status: 250ms doubling to 30s, jittered.
func (p *Puller) backoff() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fails++
	d := min(250*time.Millisecond<<min(p.fails-1, 7), 30*time.Second)
	return d/2 + rand.N(d/2+1)
}

// pull asks for a job for every free slot not yet covered by a request: at once when enough
// slots are free (or force). Fewer wait while an earlier request is still open (it takes the
// next jobs anyway, and the server keeps a bounded number of requests per consumer), or for
// Linger when none is, so that slots freed meanwhile share the request.
func (p *Puller) pull(force bool) {
	if p.stopped.Load() {
		return
	}
	p.mu.Lock()
	n := p.free - p.asked
	if n <= 0 || p.err != nil || p.checking || time.Now().Before(p.holdUntil) {
		p.mu.Unlock()
		return
	}
	if !p.nc.IsConnected() || p.nc.Stats().Reconnects != p.genConn {
		// Disconnected, or reconnected before watch started a new generation: a request now
		// would wait in the reconnect buffer, or go out on the old inbox, which nats.go
		// subscribes again after a reconnect, so the server would honour it besides the new
		// generation's request. The reconnect's reset asks for these slots.
		p.mu.Unlock()
		return
	}
	if !force && n < p.cfg.MinBatch {
		if p.asked > 0 {
			p.mu.Unlock()
			return
		}
		if p.timer == nil {
			var t *time.Timer
			t = time.AfterFunc(p.cfg.Linger, func() {
				p.mu.Lock()
				if p.timer == t {
					p.timer = nil
				}
				p.mu.Unlock()
				p.pull(true)
			})
			p.timer = t
		}
		p.mu.Unlock()
		return
	}
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if p.asked == 0 {
		p.lastSeen = time.Now() // the heartbeat clock starts with the first waiting request
	}
	inbox, expires, hb := p.inbox, p.expires, min(p.cfg.Heartbeat, p.expires/2)
	var batches []int
	for left := n; left > 0; {
		b := left
		if p.maxBatch > 0 {
			b = min(b, p.maxBatch)
		}
		batches = append(batches, b)
		left -= b
	}
	p.asked += n
	p.mu.Unlock()
	for i, b := range batches {
		req, _ := json.Marshal(struct {
			Batch     int   `json:"batch"`
			Expires   int64 `json:"expires"`
			Heartbeat int64 `json:"idle_heartbeat"`
		}{b, expires.Nanoseconds(), hb.Nanoseconds()})
		if err := p.nc.PublishRequest(p.api, inbox, req); err != nil {
			// Not sent: nothing waits on the server for these slots. The heartbeat check or
			// the reconnect makes the request again.
			unsent := 0
			for _, u := range batches[i:] {
				unsent += u
			}
			p.mu.Lock()
			if p.inbox == inbox {
				p.asked = max(0, p.asked-unsent)
			}
			p.mu.Unlock()
			p.logf(slog.LevelWarn, "publish", "pull request not sent", "err", err)
			return
		}
		p.pulls.Add(1)
		p.metrics.request(p.consumer)
	}
}

func (p *Puller) onMsg(gen uint64, m *nats.Msg) {
	p.mu.Lock()
	current := gen == p.gen
	if current {
		p.lastSeen = time.Now()
	}
	if m.Reply == "" { // jobs carry their ack subject; status replies have none
		p.mu.Unlock()
		if current {
			p.onStatus(m)
		} else {
			p.metrics.status(p.consumer, m.Header.Get("Status"), "old_generation")
		}
		return
	}
	if current {
		p.asked = max(0, p.asked-1)
		p.fails = 0
	}
	if p.free == 0 || p.stopped.Load() {
		// Too late (stopping), or sent for a request of a generation given up while it was
		// on its way: give it back, with a delay.
		p.mu.Unlock()
		if p.stopped.Load() {
			p.handBack(m, "stopped")
		} else {
			p.handBack(m, "no_free_slot")
		}
		return
	}
	p.free--
	last := current && p.asked == 0
	p.mu.Unlock()
	p.out <- m // never blocks: every message in out holds one of the slots
	if last {
		p.pull(false) // no request open any more: cover the slots still free
	}
}

// Pull status replies the puller tells apart (the reason label of the status metric).
const (
	stIdleHeartbeat     = "idle_heartbeat"      // 100
	stRequestTimeout    = "request_timeout"     // 408: the request expired (or its interest did)
	stNoMessages        = "no_messages"         // 404: only for no-wait requests, which are not sent
	stConsumerDeleted   = "consumer_deleted"    // 409
	stLeadershipChange  = "leadership_change"   // 409: the consumer's leader moved; requests dropped
	stMaxWaiting        = "max_waiting"         // 409: too many requests open on the consumer
	stMaxRequestBatch   = "max_request_batch"   // 409: batch above the consumer's MaxRequestBatch
	stMaxRequestExpires = "max_request_expires" // 409: expiry above the consumer's MaxRequestExpires
	stMaxBytes          = "max_bytes"           // 409: byte limits, never asked for
	stPushConsumer      = "push_consumer"       // 409: the consumer is not a pull consumer
	stOther409          = "other_409"
	stBadRequest        = "bad_request"   // 400
	stNoResponders      = "no_responders" // 503: no consumer (deleted) or no JetStream
	stUnknown           = "unknown"
)

// classify names a status reply.
func classify(code, desc string) string {
	d := strings.ToLower(desc)
	switch code {
	case "100":
		return stIdleHeartbeat
	case "408":
		return stRequestTimeout
	case "404":
		return stNoMessages
	case "400":
		return stBadRequest
	case "503":
		return stNoResponders
	case "409":
		switch {
		case strings.Contains(d, "consumer deleted"):
			return stConsumerDeleted
		case strings.Contains(d, "leadership change"):
			return stLeadershipChange
		case strings.Contains(d, "exceeded maxwaiting"):
			return stMaxWaiting
		case strings.Contains(d, "exceeded maxrequestbatch"):
			return stMaxRequestBatch
		case strings.Contains(d, "exceeded maxrequestexpires"):
			return stMaxRequestExpires
		case strings.Contains(d, "maxbytes") || strings.Contains(d, "batch completed"):
			return stMaxBytes
		case strings.Contains(d, "push based"):
			return stPushConsumer
		}
		return stOther409
	}
	return stUnknown
}

// onStatus handles the server's status replies to this generation's requests.
func (p *Puller) onStatus(m *nats.Msg) {
	code, desc := m.Header.Get("Status"), m.Header.Get("Description")
	reason := classify(code, desc)
	p.metrics.status(p.consumer, code, reason)
	// ended takes the messages a finished request still owed off asked; false when the reply
	// does not say (then the requests cannot be accounted for: start a new generation).
	ended := func() bool {
		n, err := strconv.Atoi(m.Header.Get("Nats-Pending-Messages"))
		if err != nil {
			return false
		}
		p.mu.Lock()
		p.asked = max(0, p.asked-n)
		p.mu.Unlock()
		return true
	}
	switch reason {
	case stIdleHeartbeat: // the requests are alive
		p.logf(slog.LevelDebug, reason, "pull requests alive", "status", code)
	case stRequestTimeout, stNoMessages:
		// Normal: an idle request expired. Ask again for what it did not bring.
		p.logf(slog.LevelDebug, reason, "pull request ended", "status", code, "description", desc)
		p.mu.Lock()
		p.fails = 0
		p.mu.Unlock()
		if ended() {
			p.pull(false)
		} else {
			p.reset(reason, 0)
		}
	case stLeadershipChange:
		// Every waiting request was dropped; the new leader takes new ones.
		p.logf(slog.LevelInfo, reason, "consumer leader changed; pulling again", "status", code)
		p.reset(reason, p.backoff())
	case stMaxWaiting:
		p.logf(slog.LevelWarn, reason, "consumer refused the pull request: too many requests waiting (its MaxWaiting); backing off",
			"status", code, "description", desc)
		p.reset(reason, p.backoff())
	case stMaxRequestBatch:
		if n := trailingInt(desc); n > 0 {
			p.mu.Lock()
			p.maxBatch = n
			p.mu.Unlock()
		}
		p.logf(slog.LevelWarn, reason, "consumer refused the pull request's batch; asking in smaller batches", "status", code, "description", desc)
		p.reset(reason, p.backoff())
	case stMaxRequestExpires:
		if i := strings.LastIndex(desc, " "); i >= 0 {
			if d, err := time.ParseDuration(desc[i+1:]); err == nil && d > 0 {
				p.mu.Lock()
				p.expires = max(d*3/4, time.Millisecond)
				p.mu.Unlock()
			}
		}
		p.logf(slog.LevelWarn, reason, "consumer refused the pull request's expiry; asking with a shorter one", "status", code, "description", desc)
		p.reset(reason, p.backoff())
	case stConsumerDeleted:
		p.logf(slog.LevelError, reason, "pull consumer was deleted", "status", code)
		p.consumerGone(reason)
	case stNoResponders:
		// Nobody serves the consumer's pull subject: the consumer is gone, or JetStream is not
		// (yet) up after a restart. Ask the API which.
		p.logf(slog.LevelWarn, reason, "no responder for the pull request; checking the consumer", "status", code)
		p.consumerGone(reason)
	case stPushConsumer:
		p.logf(slog.LevelError, reason, "consumer is a push consumer; it cannot be pulled from", "status", code)
		p.fail(fmt.Errorf("%w: %s on stream %s is a push consumer", ErrConsumerGone, p.consumer, p.stream))
	case stBadRequest:
		// A request the server cannot read is a bug here or in between (a proxy); retrying
		// slowly keeps the worker alive while the log and the metric show it.
		p.logf(slog.LevelError, reason, "server rejected the pull request", "status", code, "description", desc)
		p.reset(reason, p.backoff())
	default:
		p.logf(slog.LevelWarn, reason, "unexpected status for a pull request; pulling again after a pause", "status", code, "description", desc)
		p.reset(reason, p.backoff())
	}
}

// consumerGone checks whether the consumer still exists; a deleted one is created again
// (Recreate) or ends the puller with ErrConsumerGone. While JetStream does not answer, it
// keeps checking with backoff.
func (p *Puller) consumerGone(reason string) {
	p.mu.Lock()
	if p.checking || p.stopped.Load() {
		p.mu.Unlock()
		return
	}
	p.checking = true
	p.mu.Unlock()
	go func() {
		defer func() {
			p.mu.Lock()
			p.checking = false
			p.mu.Unlock()
		}()
		for !p.stopped.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := p.js.Consumer(ctx, p.stream, p.consumer)
			switch {
			case err == nil:
				cancel()
				if reason == stNoResponders {
					// There, but did not answer: a restarted server still loading it.
					p.logf(slog.LevelWarn, reason, "pull request got no responder though the consumer exists; pulling again", "status", "503")
				}
				p.checkingDone()
				p.reset(reason, p.backoff())
				return
			case errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound):
				if p.cfg.Recreate == nil {
					cancel()
					p.logf(slog.LevelError, "gone", "pull consumer does not exist; no more jobs from it", "err", err)
					p.fail(fmt.Errorf("%w: %s on stream %s: %w", ErrConsumerGone, p.consumer, p.stream, err))
					return
				}
				rerr := p.cfg.Recreate(ctx)
				cancel()
				if rerr == nil {
					p.metrics.recreated(p.consumer)
					p.log.Warn("pull consumer was gone; created it again", "after", reason)
					p.checkingDone()
					p.reset("recreated", 0)
					return
				}
				p.logf(slog.LevelError, "recreate", "pull consumer is gone and creating it again failed; retrying", "err", rerr)
			default:
				cancel()
				p.logf(slog.LevelWarn, "unavailable", "JetStream does not answer for the pull consumer; retrying", "after", reason, "err", err)
			}
			select {
			case <-p.done:
				return
			case <-time.After(p.backoff()):
			}
		}
	}()
}

func (p *Puller) checkingDone() {
	p.mu.Lock()
	p.checking = false
	p.mu.Unlock()
}

// fail ends the puller's pulling with err, which Next returns.
func (p *Puller) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return
	}
	p.err = err
	close(p.failed)
}

// watch makes the requests again after a reconnect (the server may have forgotten them, or
// kept them: a new generation covers both) or when the server stopped sending heartbeats.
func (p *Puller) watch() {
	t := time.NewTicker(p.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case _, ok := <-p.status:
			if !ok {
				return
			}
			p.logf(slog.LevelInfo, "reconnected", "reconnected to NATS; pulling on a new inbox")
			p.reset("reconnected", 0)
		case <-t.C:
			p.mu.Lock()
			lost := p.asked > 0 && time.Since(p.lastSeen) > 2*p.cfg.Heartbeat+p.cfg.Heartbeat/2
			missed := p.nc.IsConnected() && p.nc.Stats().Reconnects != p.genConn
			p.mu.Unlock()
			if missed {
				// A reconnect whose status event never came (the listener's channel was full):
				// pull refuses the old generation, so start a new one here.
				p.logf(slog.LevelInfo, "reconnected", "reconnected to NATS; pulling on a new inbox")
				p.reset("reconnected", 0)
			} else if lost {
				p.logf(slog.LevelWarn, "heartbeats_missed", "no heartbeat for the open pull requests; pulling again on a new inbox")
				p.reset("heartbeats_missed", 0)
			}
		}
	}
}

type logMark struct {
	at         time.Time
	suppressed int
}

// logf logs a line (with key as its reason) at most once per LogEvery for each key, saying
// how many were left out.
func (p *Puller) logf(level slog.Level, key, msg string, args ...any) {
	if !p.log.Enabled(context.Background(), level) {
		return
	}
	p.mu.Lock()
	mark := p.logged[key]
	if !mark.at.IsZero() && time.Since(mark.at) < p.cfg.LogEvery {
		mark.suppressed++
		p.logged[key] = mark
		p.mu.Unlock()
		return
	}
	p.logged[key] = logMark{at: time.Now()}
	p.mu.Unlock()
	args = append(args, "reason", key)
	if mark.suppressed > 0 {
		args = append(args, "repeated", mark.suppressed)
	}
	p.log.Log(context.Background(), level, msg, args...)
}

func trailingInt(s string) int {
	i := strings.LastIndex(s, " ")
	n, _ := strconv.Atoi(s[i+1:])
	return n
}

// Msg is a pulled job: its payload and the acknowledgements a worker sends for it.
type Msg struct{ m *nats.Msg }

// Data is the job payload.
func (m *Msg) Data() []byte { return m.m.Data }

// Subject is the subject the job was published on.
func (m *Msg) Subject() string { return m.m.Subject }

// Delivered is how many times JetStream has delivered this job (1 the first time).
func (m *Msg) Delivered() int {
	md, err := m.m.Metadata()
	if err != nil {
		return 1
	}
	return int(md.NumDelivered)
}

// AckSubject is where the job's acknowledgements go (a controller may ack it for the worker).
func (m *Msg) AckSubject() string { return m.m.Reply }

// Ack marks the job done.
func (m *Msg) Ack() error { return m.m.Ack() }

// NakWithDelay hands the job back for redelivery after d.
func (m *Msg) NakWithDelay(d time.Duration) error { return m.m.NakWithDelay(d) }

// InProgress resets the job's AckWait: the step still runs.
func (m *Msg) InProgress() error { return m.m.InProgress() }

// TermWithReason drops the job for good; the reason goes into the server's advisory.
func (m *Msg) TermWithReason(reason string) error {
	return m.m.Respond([]byte("+TERM " + reason))
}
