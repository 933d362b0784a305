package audit

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter bounds the entries recorded for callers nobody authenticated (auth.failed,
// webhook.rejected): anyone can send those requests, so without a bound a brute force or a
// flood of forged webhooks would fill the stream and push real entries out. Each remote host
// gets a small budget, all hosts together a larger one; what is over budget is counted, and
// the host's next recorded entry says how many went unrecorded.
type Limiter struct {
	perHost  rate.Limit
	burst    int
	maxHosts int
	now      func() time.Time

	mu     sync.Mutex
	global *rate.Limiter
	hosts  map[string]*hostBudget
}

type hostBudget struct {
	lim        *rate.Limiter
	suppressed int
}

// LimiterOption configures a Limiter.
type LimiterOption func(*Limiter)

// PerHost lets each host record burst entries at once and then one every interval.
func PerHost(every time.Duration, burst int) LimiterOption {
	return func(l *Limiter) { l.perHost, l.burst = rate.Every(every), burst }
}

// Overall bounds the entries of all hosts together: burst at once, then one every interval.
func Overall(every time.Duration, burst int) LimiterOption {
	return func(l *Limiter) { l.global = rate.NewLimiter(rate.Every(every), burst) }
}

// WithClock sets the limiter's clock (tests).
func WithClock(now func() time.Time) LimiterOption { return func(l *Limiter) { l.now = now } }

// NewLimiter returns a limiter; by default a host records 5 entries at once and then one
// every 10 s, and all hosts together 50 at once and then 5 a second.
func NewLimiter(opts ...LimiterOption) *Limiter {
	l := &Limiter{perHost: rate.Every(10 * time.Second), burst: 5, maxHosts: 10000, now: time.Now,
		global: rate.NewLimiter(rate.Every(200*time.Millisecond), 50), hosts: map[string]*hostBudget{}}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Allow reports whether an entry for remote (host:port) may be recorded now and, when it
// may, how many of the host's entries were not recorded since its last one.
func (l *Limiter) Allow(remote string) (ok bool, suppressed int) {
	host := Host(remote)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.hosts[host]
	if b == nil {
		if len(l.hosts) >= l.maxHosts {
			l.forgetIdle(now)
		}
		if len(l.hosts) >= l.maxHosts {
			return false, 0 // a flood from very many hosts: the overall budget is spent anyway
		}
		b = &hostBudget{lim: rate.NewLimiter(l.perHost, l.burst)}
		l.hosts[host] = b
	}
	if !b.lim.AllowN(now, 1) {
		b.suppressed++
		return false, 0
	}
	if !l.global.AllowN(now, 1) {
		b.suppressed++
		return false, 0
	}
	n := b.suppressed
	b.suppressed = 0
	return true, n
}

// forgetIdle drops the hosts whose budget is full again and who lost nothing: remembering
// them would change no answer.
func (l *Limiter) forgetIdle(now time.Time) {
	for h, b := range l.hosts {
		if b.suppressed == 0 && b.lim.TokensAt(now) >= float64(l.burst) {
			delete(l.hosts, h)
		}
	}
}
