package queue

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrPullerStopped is returned by Puller.Next once Stop was called.
var ErrPullerStopped = errors.New("puller stopped")

// Puller hands a pool consumer's jobs to a fixed number of worker slots.
//
// It asks the server for at most as many messages as there are free slots, so a job never
// waits in a client buffer, its AckWait running, while this worker's slots are busy and
// another worker idles. And it asks for several freed slots in one pull request instead of
// one request per job, which under load took a server message and two JSON documents per
// step. nats.go's pull iterators offer one or the other (one message per iterator, or a
// buffer of N), not both, so this speaks JetStream's pull protocol (a request on
// $JS.API.CONSUMER.MSG.NEXT, messages and status replies on one inbox) itself.
type Puller struct {
	nc     *nats.Conn
	api    string
	inbox  string
	sub    *nats.Subscription
	out    chan *nats.Msg
	cfg    PullerConfig
	status chan nats.Status

	mu       sync.Mutex
	free     int // slots holding no job (a job in out holds its slot)
	asked    int // messages requested and neither delivered nor expired
	timer    *time.Timer
	lastSeen time.Time // last message or heartbeat from the server
	stopped  atomic.Bool
	done     chan struct{}
	pulls    atomic.Int64
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
	p := &Puller{nc: nc, api: "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + consumer, inbox: nc.NewInbox(),
		out: make(chan *nats.Msg, slots), cfg: cfg, free: slots, lastSeen: time.Now(), done: make(chan struct{})}
	sub, err := nc.Subscribe(p.inbox, p.onMsg)
	if err != nil {
		return nil, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	p.sub = sub
	p.status = nc.StatusChanged(nats.CONNECTED)
	go p.watch()
	p.pull(true)
	return p, nil
}

// Next returns the next job for a free slot. The caller calls Release when the slot is free
// again. After Stop it returns ErrPullerStopped.
func (p *Puller) Next(ctx context.Context) (*Msg, error) {
	select {
	case m := <-p.out:
		if p.stopped.Load() {
			_ = m.Nak()
			return nil, ErrPullerStopped
		}
		return &Msg{m: m}, nil
	case <-p.done:
		return nil, ErrPullerStopped
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
// handed back at once for redelivery (to this or another worker), not left to time out. Only
// a job the server sends in the very instant the subscription ends is lost to this worker
// and redelivered after AckWait, as with nats.go's own iterators.
func (p *Puller) Stop() {
	if p.stopped.Swap(true) {
		return
	}
	close(p.done)
	p.mu.Lock()
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	p.nc.RemoveStatusListener(p.status)
	// Drain: the server forgets our pull requests, and what it sent before reaches onMsg.
	if err := p.sub.Drain(); err == nil {
		for deadline := time.Now().Add(5 * time.Second); p.sub.IsValid() && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	for {
		select {
		case m := <-p.out:
			_ = m.Nak()
		default:
			return
		}
	}
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
	if n <= 0 {
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
	p.asked += n
	p.mu.Unlock()
	req, _ := json.Marshal(struct {
		Batch     int   `json:"batch"`
		Expires   int64 `json:"expires"`
		Heartbeat int64 `json:"idle_heartbeat"`
	}{n, p.cfg.Expires.Nanoseconds(), p.cfg.Heartbeat.Nanoseconds()})
	if err := p.nc.PublishRequest(p.api, p.inbox, req); err != nil {
		// Not sent: nothing waits on the server for these slots. The heartbeat check or
		// the reconnect makes the request again.
		p.mu.Lock()
		p.asked = max(0, p.asked-n)
		p.mu.Unlock()
		return
	}
	p.pulls.Add(1)
}

func (p *Puller) onMsg(m *nats.Msg) {
	p.mu.Lock()
	p.lastSeen = time.Now()
	if m.Reply == "" { // jobs carry their ack subject; status replies have none
		p.onStatus(m.Header.Get("Status"), m)
		return // onStatus unlocks
	}
	p.asked = max(0, p.asked-1)
	if p.free == 0 || p.stopped.Load() {
		// More than we asked for (requests thought lost came back) or too late: give it back.
		p.mu.Unlock()
		_ = m.Nak()
		return
	}
	p.free--
	last := p.asked == 0
	p.mu.Unlock()
	p.out <- m // never blocks: every message in out holds one of the slots
	if last {
		p.pull(false) // no request open any more: cover the slots still free
	}
}

// onStatus handles the server's status replies; p.mu is held and released here.
func (p *Puller) onStatus(status string, m *nats.Msg) {
	switch status {
	case "100": // idle heartbeat: the requests are alive
		p.mu.Unlock()
		return
	case "408", "404", "409":
		// The request ended (expired, or the server dropped it); the header says how many of
		// its messages were never sent. Without it, take every request as gone.
		if n, err := strconv.Atoi(m.Header.Get("Nats-Pending-Messages")); err == nil {
			p.asked = max(0, p.asked-n)
		} else {
			p.asked = 0
		}
		p.mu.Unlock()
		if status == "408" {
			p.pull(false)
			return
		}
		// Consumer deleted, leader change, too many waiting requests: ask again after a
		// pause rather than in a tight loop.
		time.AfterFunc(500*time.Millisecond, func() { p.pull(true) })
	default:
		p.mu.Unlock()
	}
}

// watch makes the requests again after a reconnect (the server forgot them) or when the
// server stopped sending heartbeats for them.
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
			p.mu.Lock()
			p.asked = 0
			p.mu.Unlock()
			p.pull(true)
		case <-t.C:
			p.mu.Lock()
			lost := p.asked > 0 && time.Since(p.lastSeen) > 2*p.cfg.Heartbeat+p.cfg.Heartbeat/2
			if lost {
				p.asked = 0
			}
			p.mu.Unlock()
			if lost {
				p.pull(true)
			}
		}
	}
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
