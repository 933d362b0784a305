// Package syncwindow evaluates Argo CD sync windows the way Argo CD does: which windows are
// active at an instant, whether an automated or a manual sync may run, and — what Argo CD
// does not say — when a block ends, from each window's cron schedule, duration and time zone.
// The Argo CD agent and the simulated agent use it to fill agent.AppStatus.SyncWindows.
package syncwindow

import (
	"errors"
	"fmt"
	"strings"
	"time"
	// Windows name IANA time zones; the image has no zoneinfo of its own.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"

	"github.com/prflow/prflow/deploy/agent"
)

// Argo CD parses schedules with exactly these fields (no seconds, no @descriptors).
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// ErrInvalid is wrapped by errors about a window that does not parse.
var ErrInvalid = errors.New("invalid sync window")

// horizon bounds the search for the end of a block; maxEvents bounds the work it does
// (a window every minute for a year is half a million boundaries).
const (
	horizon   = 366 * 24 * time.Hour
	maxEvents = 20000
)

// Window is one sync window.
type Window struct {
	Kind       string `json:"kind"`               // allow or deny
	Schedule   string `json:"schedule"`           // 5-field cron
	Duration   string `json:"duration"`           // Go duration
	TimeZone   string `json:"timeZone,omitempty"` // IANA name; "" is UTC
	ManualSync bool   `json:"manualSync,omitempty"`
}

type parsed struct {
	w     Window
	sched cron.Schedule
	dur   time.Duration
}

// Parse checks a window as Argo CD's validation does (kind, schedule, duration, time zone)
// and says which field is wrong.
func Parse(w Window) error {
	_, err := parse(w)
	return err
}

func parse(w Window) (parsed, error) {
	p := parsed{w: w}
	switch w.Kind {
	case "allow", "deny":
	default:
		return p, fmt.Errorf("%w: kind %q: want allow or deny", ErrInvalid, w.Kind)
	}
	loc := time.UTC
	if w.TimeZone != "" {
		l, err := time.LoadLocation(w.TimeZone)
		if err != nil {
			return p, fmt.Errorf("%w: %s window %q: timeZone %q: %v", ErrInvalid, w.Kind, w.Schedule, w.TimeZone, err)
		}
		loc = l
	}
	s, err := parser.Parse(w.Schedule)
	if err != nil {
		return p, fmt.Errorf("%w: %s window: schedule %q: %v", ErrInvalid, w.Kind, w.Schedule, err)
	}
	if spec, ok := s.(*cron.SpecSchedule); ok {
		spec.Location = loc
	}
	d, err := time.ParseDuration(w.Duration)
	if err != nil || d <= 0 {
		return p, fmt.Errorf("%w: %s window %q: duration %q: want a positive duration such as 1h30m", ErrInvalid, w.Kind, w.Schedule, w.Duration)
	}
	p.sched, p.dur = s, d
	return p, nil
}

// active: a window is open strictly after a start and strictly before start+duration, as
// Argo CD computes it (the next start after t-duration lies before t).
func (p parsed) active(t time.Time) bool {
	n := p.sched.Next(t.Add(-p.dur))
	return !n.IsZero() && n.Before(t)
}

// canSync is Argo CD's SyncWindows.CanSync: an active deny window blocks (a manual sync
// passes only if every active deny window allows manual syncs); an active allow window lets
// syncs through; allow windows none of which is active block (manual: every one must allow
// manual syncs); no window at all lets everything through.
func canSync(ws []parsed, t time.Time, manual bool) bool {
	deny, denyManual := false, true
	allowActive, allows, allowManual := false, false, true
	for _, w := range ws {
		on := w.active(t)
		switch w.w.Kind {
		case "deny":
			if on {
				deny = true
				denyManual = denyManual && w.w.ManualSync
			}
		case "allow":
			allows = true
			allowActive = allowActive || on
			allowManual = allowManual && w.w.ManualSync
		}
	}
	switch {
	case deny:
		return manual && denyManual
	case allowActive:
		return true
	case allows:
		return manual && allowManual
	}
	return true
}

// Evaluate says what windows (the ones assigned to one app) mean at now. It returns nil for
// no windows. A window that does not parse makes the app blocked with Error set, as Argo CD
// refuses every sync then.
func Evaluate(windows []Window, now time.Time) *agent.SyncWindows {
	if len(windows) == 0 {
		return nil
	}
	out := &agent.SyncWindows{Windows: make([]agent.SyncWindow, len(windows))}
	ps := make([]parsed, 0, len(windows))
	var errs []string
	for i, w := range windows {
		out.Windows[i] = agent.SyncWindow{Kind: w.Kind, Schedule: w.Schedule, Duration: w.Duration, TimeZone: w.TimeZone, ManualSync: w.ManualSync}
		p, err := parse(w)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		out.Windows[i].Active = p.active(now)
		ps = append(ps, p)
	}
	if len(errs) > 0 {
		out.Blocked, out.Error = true, strings.Join(errs, "; ")
		return out
	}
	out.Blocked = !canSync(ps, now, false)
	out.ManualSync = canSync(ps, now, true)
	if out.Blocked {
		out.Until = opens(ps, now)
	}
	return out
}

// opens is the first boundary after now at which an automated sync may run (zero when there
// is none within the horizon). Between two boundaries (a start or an end of some window)
// nothing changes, so it is enough to look just after each.
func opens(ps []parsed, now time.Time) time.Time {
	cursor := now
	for n := 0; n < maxEvents && cursor.Sub(now) <= horizon; n++ {
		next := time.Time{}
		for _, p := range ps {
			// The next start, and the end of the occurrence running at cursor (if any).
			for _, t := range []time.Time{p.sched.Next(cursor), endOfCurrent(p, cursor)} {
				if !t.IsZero() && t.After(cursor) && (next.IsZero() || t.Before(next)) {
					next = t
				}
			}
		}
		if next.IsZero() {
			return time.Time{}
		}
		// An allow window is open only after its start instant: look a second later (cron
		// works in minutes), and report the boundary itself.
		if canSync(ps, next.Add(time.Second), false) {
			return next.UTC()
		}
		cursor = next
	}
	return time.Time{}
}

// endOfCurrent is the latest end of an occurrence of p still open at t, zero if none is.
func endOfCurrent(p parsed, t time.Time) time.Time {
	end := time.Time{}
	// Occurrences may overlap when the duration is longer than the period; follow them.
	for s, i := p.sched.Next(t.Add(-p.dur)), 0; !s.IsZero() && !s.After(t) && i < 1000; s, i = p.sched.Next(s), i+1 {
		if e := s.Add(p.dur); e.After(end) {
			end = e
		}
	}
	if !end.After(t) {
		return time.Time{}
	}
	return end
}

// NextChange is the first boundary after now at which the state of the windows may change
// (a window starts or ends), zero when none does within the horizon or a window does not
// parse. Agents re-evaluate then.
func NextChange(windows []Window, now time.Time) time.Time {
	next := time.Time{}
	for _, w := range windows {
		p, err := parse(w)
		if err != nil {
			return time.Time{}
		}
		for _, t := range []time.Time{p.sched.Next(now), endOfCurrent(p, now)} {
			if !t.IsZero() && t.After(now) && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
	}
	return next
}
