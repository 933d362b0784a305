package controller

import (
	"context"
	"errors"
	"fmt"
	"github.com/prflow/prflow/steps/spelling"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/steps"
)

// WithAudit records in the audit log who started, cancelled or was refused a run, approval
// decisions, webhooks accepted and rejected, token use and failed authentications.
func WithAudit(l *audit.Log) Option { return func(c *Controller) { c.audit = l } }

// WithAuditLimiter sets the budget of entries for unauthenticated callers (auth.failed,
// webhook.rejected); the default is audit.NewLimiter().
func WithAuditLimiter(l *audit.Limiter) Option { return func(c *Controller) { c.auditLimit = l } }

// record appends to the audit log when there is one; a failed append is logged, never
// fails the action (the action already happened).
func (c *Controller) record(ctx context.Context, e audit.Entry) {
	if c.audit == nil {
		return
	}
	if err := c.audit.Append(ctx, e); err != nil {
		c.log.Error("audit entry not written", "action", e.Action, "actor", e.Actor, "run", e.Run, "err", err)
	}
}

// auditQuery are the query parameters of GET /api/v1/audit.
var auditQuery = []string{"since", "actor", "action", "run", "remote", "limit"}

// apiAudit serves GET /api/v1/audit?since=RFC3339|duration&actor=&action=&run=&remote=&limit=.
// action may repeat or hold a comma-separated list; each is an action or a family (webhook.*).
// An unknown parameter or action is refused (400) instead of silently matching everything.
func (c *Controller) apiAudit(w http.ResponseWriter, r *http.Request) {
	if c.audit == nil {
		writeErr(w, http.StatusNotFound, errors.New("the audit log is off on this server"))
		return
	}
	q := r.URL.Query()
	for k := range q {
		if !slices.Contains(auditQuery, k) {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("unknown query parameter %q%s (known: %s)", k, didYouMean(k, auditQuery), strings.Join(auditQuery, ", ")))
			return
		}
	}
	for _, k := range []string{"since", "actor", "run", "remote", "limit"} {
		if len(q[k]) > 1 {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("query parameter %s is given %d times; give it once", k, len(q[k])))
			return
		}
	}
	f := audit.Filter{Actor: q.Get("actor"), Run: q.Get("run"), Remote: q.Get("remote")}
	for _, v := range q["action"] {
		for a := range strings.SplitSeq(v, ",") {
			a = strings.TrimSpace(a)
			if a == "" {
				continue
			}
			if err := audit.CheckAction(a); err != nil {
				writeErr(w, http.StatusBadRequest, fmt.Errorf("action: %w", err))
				return
			}
			f.Actions = append(f.Actions, a)
		}
	}
	if s := q.Get("since"); s != "" {
		if d, err := time.ParseDuration(s); err == nil && d >= 0 {
			f.Since = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339, s); err == nil {
			f.Since = t
		} else {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("since: want RFC3339 time or a duration like 24h, got %q", s))
			return
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("limit: want a positive number, got %q", s))
			return
		}
		f.Limit = n
	}
	list, err := c.audit.Query(r.Context(), f)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// didYouMean names the closest of known to s, or says nothing when none is close.
func didYouMean(s string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := spelling.Distance(s, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// recordSignal audits an approval decision (approval.approved / approval.rejected) or another
// signal (signal.<kind>) sent to a step.
func (c *Controller) recordSignal(ctx context.Context, run, stage, step string, sig steps.Signal) {
	action := audit.SignalPrefix + sig.Kind
	if sig.Kind == "approval" {
		action = audit.ApprovalRejected
		if sig.Approve {
			action = audit.ApprovalApproved
		}
	}
	c.record(ctx, audit.Entry{Actor: sig.User, Action: action, Run: run, Detail: stage + "." + step})
}

// auditTokenUse records the token behind a request that changes something (token.used).
func (c *Controller) auditTokenUse(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.RecordTokenUse(r, UserFrom(r.Context()))
		next.ServeHTTP(w, r)
	})
}

// RecordTokenUse records that u's token authenticated r (token.used): the user and the token's
// name from the tokens file, never the token or its digest. Callers record only requests that
// change something: reads (a UI page refresh, `prflow status --watch`, log follows) would add
// an entry per call and bury the entries that matter; the request metrics count them. A user
// no token authenticated (prflow dev's anonymous user) records nothing.
func (c *Controller) RecordTokenUse(r *http.Request, u User) {
	label := u.TokenLabel()
	if c.audit == nil || label == "" {
		return
	}
	c.record(r.Context(), audit.Entry{Actor: u.Name, Action: audit.TokenUsed, Run: r.PathValue("id"), Remote: r.RemoteAddr,
		Detail: label + ": " + r.Method + " " + clip(r.URL.Path, 200)})
}

// Unauthenticated is the actor of entries about callers nobody could identify.
const Unauthenticated = "unauthenticated"

// RecordAuthFailure records a request whose bearer token is missing or unknown (auth.failed),
// within the budget of the remote host (audit.Limiter): a brute force records a handful of
// entries, each saying how many attempts went unrecorded before it. The token is never
// recorded, nor any header.
func (c *Controller) RecordAuthFailure(r *http.Request, reason string) {
	ok, lost := c.allowUnauthenticated(r)
	if !ok {
		return
	}
	c.record(r.Context(), audit.Entry{Actor: Unauthenticated, Action: audit.AuthFailed, Remote: r.RemoteAddr,
		Detail: r.Method + " " + clip(r.URL.Path, 200) + ": " + reason + unrecorded(lost)})
}

func (c *Controller) allowUnauthenticated(r *http.Request) (bool, int) {
	if c.audit == nil {
		return false, 0
	}
	if c.auditLimit == nil {
		return true, 0
	}
	return c.auditLimit.Allow(r.RemoteAddr)
}

func unrecorded(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d more from this host not recorded)", n)
}

// authFailure says why a request did not authenticate, without the token.
func authFailure(r *http.Request, err error) string {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "no bearer token"
	}
	if tok, ok := strings.CutPrefix(h, "Bearer "); !ok || tok == "" {
		return "Authorization is not a bearer token"
	}
	if err != nil && !errors.Is(err, errUnknownToken) {
		return err.Error() // an OIDC token's refusal (never holds the token)
	}
	return "unknown bearer token"
}

// recordHookRejected records a webhook refused before anything was queued (webhook.rejected),
// within the remote host's budget: the forge's delivery id when it sent one, why, and never
// the body, the signature or the token header.
func (c *Controller) recordHookRejected(r *http.Request, provider string, code int) {
	ok, lost := c.allowUnauthenticated(r)
	if !ok {
		return
	}
	why := map[int]string{http.StatusUnauthorized: "signature missing or invalid", http.StatusRequestEntityTooLarge: "body too large",
		http.StatusBadRequest: "malformed event"}[code]
	if why == "" {
		why = http.StatusText(code)
	}
	c.record(r.Context(), audit.Entry{Actor: "webhook:" + provider, Action: audit.WebhookRejected, Remote: r.RemoteAddr,
		Delivery: deliveryHeader(r, provider), Detail: fmt.Sprintf("%s (HTTP %d)%s", why, code, unrecorded(lost))})
}

// deliveryHeader is the delivery id a forge sends with a webhook, when it looks like one (the
// request is not verified yet: anything else is left out).
func deliveryHeader(r *http.Request, provider string) string {
	var v string
	switch provider {
	case "github":
		v = r.Header.Get("X-GitHub-Delivery")
	case "gitlab":
		v = r.Header.Get("X-Gitlab-Event-UUID")
	case "bitbucket":
		v = r.Header.Get("X-Request-UUID")
	}
	if len(v) > 64 {
		return ""
	}
	for _, ch := range v {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '{' || ch == '}') {
			return ""
		}
	}
	return v
}

// recordHookAccepted records a verified forge event once it was processed (webhook.accepted):
// the forge and sender, the delivery, where it came from, what it was about and the runs it
// started, or that no trigger matched. Keyed by the event so a redelivery records nothing new.
func (c *Controller) recordHookAccepted(ctx context.Context, ev *scm.Event, remote string, runs, notes, failed []string) {
	actor := "webhook:" + ev.Provider
	if ev.Sender != "" {
		actor += ":" + ev.Sender
	}
	outcome := "no trigger matched"
	if len(runs) > 0 {
		outcome = "started " + strings.Join(runs, ", ")
	}
	if len(notes) > 0 {
		outcome += "; " + strings.Join(notes, "; ")
	}
	if len(failed) > 0 {
		outcome += fmt.Sprintf("; %d trigger(s) failed", len(failed))
	}
	c.record(ctx, audit.Entry{Actor: actor, Action: audit.WebhookAccepted, Runs: runs, Remote: remote, Delivery: ev.DeliveryID,
		Detail: describeEvent(ev) + ": " + outcome, Errors: failed, ID: audit.WebhookAccepted + "/" + ev.Provider + "/" + ev.DedupeKey()})
}

// WebhookEvents lists the newest webhook entries of the audit log (accepted and rejected
// deliveries, with the runs they started and the triggers that failed), newest first; the
// UI's event list shows them. Without an audit log it is an error saying so.
func (c *Controller) WebhookEvents(ctx context.Context, limit int) ([]audit.Entry, error) {
	if c.audit == nil {
		return nil, errors.New("the audit log is off on this server: webhook events are not recorded")
	}
	list, err := c.audit.Query(ctx, audit.Filter{Actions: []string{"webhook.*"}, Limit: limit})
	if err != nil {
		return nil, err
	}
	slices.Reverse(list)
	return list, nil
}

// describeEvent says what an event is about: kind, repo, ref.
func describeEvent(ev *scm.Event) string {
	switch ev.Kind {
	case scm.EventPush:
		if ev.Deleted {
			return fmt.Sprintf("push to %s: branch %s deleted", ev.Repo, ev.Branch)
		}
		return fmt.Sprintf("push to %s branch %s at %s", ev.Repo, ev.Branch, short(ev.After))
	case scm.EventPullRequest:
		if ev.PR != nil {
			return fmt.Sprintf("pull request %s#%d %s (%s into %s)", ev.Repo, ev.PR.Number, ev.Action, ev.PR.Head, ev.PR.Base)
		}
	case scm.EventStatus:
		return fmt.Sprintf("status %s %s on %s at %s", ev.Context, ev.State, ev.Repo, short(ev.SHA))
	}
	return fmt.Sprintf("%s event on %s", ev.Kind, ev.Repo)
}

// short is a SHA's usual 12-character prefix.
func short(sha string) string { return sha[:min(len(sha), 12)] }
