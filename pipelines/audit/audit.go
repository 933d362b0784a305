// Package audit keeps an append-only log of what people and systems did (run started, policy
// denied, cancelled, approved, webhook accepted, token used, …) in the JetStream stream
// PRFLOW_AUDIT: who, when, what, on which run, from where. Entries carry names, never secrets.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/prflow/prflow/steps/spelling"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream and subject prefix of the audit log; the subject is prflow.audit.<action>.
const (
	Stream        = "PRFLOW_AUDIT"
	subjectPrefix = "prflow.audit."
)

// Actions recorded. Every action is <family>.<verb>: a filter may name a whole family
// (webhook.*).
const (
	RunStarted   = "run.started"
	PolicyDenied = "policy.denied"
	RunCancelled = "run.cancelled"
	// RunArchived is a finished run the runs retention deleted from prflow-runs; the entry
	// keeps its summary (pipeline, status, who, when, trigger).
	RunArchived = "run.archived"
	// ApprovalApproved and ApprovalRejected are decisions sent to an Approval step.
	ApprovalApproved = "approval.approved"
	ApprovalRejected = "approval.rejected"
	// InterventionDecided is a person's decision on a stage parked by a manual failure
	// strategy (retry, ignore, abort, rollback).
	InterventionDecided = "intervention.decided"
	// WebhookAccepted is a forge event that was verified and processed: which runs it started,
	// or that no trigger matched.
	WebhookAccepted = "webhook.accepted"
	// WebhookRejected is a webhook refused before anything was queued (bad signature, body
	// too large or malformed).
	WebhookRejected = "webhook.rejected"
	// TokenUsed is an API token that authenticated a request that changes something.
	TokenUsed = "token.used"
	// AuthFailed is a request with a missing or unknown bearer token.
	AuthFailed = "auth.failed"
	// RBACDenied is a request of an authenticated caller the RBAC policy refused (who, with
	// which groups, and the resource, action and object).
	RBACDenied = "rbac.denied"
	// SignalPrefix starts the action of a signal other than an approval: signal.<kind>.
	SignalPrefix = "signal."
)

// Actions lists the fixed actions (signal.<kind> comes on top), for filters and help texts.
var Actions = []string{RunStarted, RunCancelled, RunArchived, PolicyDenied, ApprovalApproved, ApprovalRejected, InterventionDecided,
	WebhookAccepted, WebhookRejected, TokenUsed, AuthFailed, RBACDenied}

// Entry is one audit record.
type Entry struct {
	Seq      uint64    `json:"seq,omitempty"` // stream sequence, set when read
	Time     time.Time `json:"time"`
	Actor    string    `json:"actor"`              // a user name or a system (webhook:github:octocat)
	Action   string    `json:"action"`             // run.started, policy.denied, …
	Run      string    `json:"run,omitempty"`      // the run it concerns
	Runs     []string  `json:"runs,omitempty"`     // the runs a webhook started
	Remote   string    `json:"remote,omitempty"`   // where the request came from (host:port)
	Delivery string    `json:"delivery,omitempty"` // a webhook's delivery id
	Detail   string    `json:"detail,omitempty"`   // what was decided, for people
	// Errors are what failed while the action was handled, for people: a trigger whose if or
	// input expression failed on a webhook's event (so it started no run).
	Errors []string `json:"errors,omitempty"`

	// ID, when set, deduplicates the append (Nats-Msg-Id): an action that may be processed
	// twice (a redelivered webhook event, two controller replicas) is recorded once.
	ID string `json:"-"`
}

// Retention bounds how much the audit stream keeps; zero fields mean no limit of that kind.
// When a limit is reached the oldest entries go.
type Retention struct {
	MaxAge   time.Duration
	MaxBytes int64
}

// DefaultRetention keeps 90 days of entries.
var DefaultRetention = Retention{MaxAge: 90 * 24 * time.Hour}

// Setup creates the audit stream, or updates an existing one's limits to r.
func Setup(ctx context.Context, js jetstream.JetStream, replicas int, r Retention) error {
	if replicas <= 0 {
		replicas = 1
	}
	if r.MaxAge < 0 {
		return fmt.Errorf("audit retention: max age %s is negative (0 keeps entries for ever)", r.MaxAge)
	}
	if r.MaxBytes < 0 {
		return fmt.Errorf("audit retention: max bytes %d is negative (0 means no size limit)", r.MaxBytes)
	}
	maxBytes := r.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: Stream, Subjects: []string{subjectPrefix + ">"},
		Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardOld, MaxAge: r.MaxAge, MaxBytes: maxBytes,
		Storage: jetstream.FileStorage, Replicas: replicas, Description: "audit log: who did what, when, from where"})
	if err != nil {
		return fmt.Errorf("create or update stream %s (max age %s, max bytes %d): %w", Stream, r.MaxAge, r.MaxBytes, err)
	}
	return nil
}

// Log appends to and reads the audit stream.
type Log struct{ JS jetstream.JetStream }

// Append records e (Time defaults to now).
func (l *Log) Append(ctx context.Context, e Entry) error {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	if e.Action == "" || strings.ContainsAny(e.Action, " *>") || strings.Count(e.Action, ".") != 1 {
		return fmt.Errorf("audit: bad action %q", e.Action)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	var opts []jetstream.PublishOpt
	if e.ID != "" {
		opts = append(opts, jetstream.WithMsgID(e.ID))
	}
	if _, err := l.JS.Publish(ctx, subjectPrefix+e.Action, b, opts...); err != nil {
		return fmt.Errorf("audit: append %s: %w", e.Action, err)
	}
	return nil
}

// Filter selects entries; zero fields match everything.
type Filter struct {
	Since time.Time
	Actor string
	// Actions: any of these; each an action (run.started) or a family (webhook.*).
	Actions []string
	Run     string // the entry's run, or one of the runs a webhook started
	Remote  string // host:port as recorded, or the host alone
	Limit   int    // at most this many, the newest last; 0 = 1000
}

// ErrFilter marks a filter that names something the log cannot hold.
var ErrFilter = errors.New("audit filter")

// CheckAction reports whether a (an action filter) can match anything: a known action,
// signal.<kind>, or a family of them written <family>.*. A typo is an error naming the
// closest action.
func CheckAction(a string) error {
	if slices.Contains(Actions, a) {
		return nil
	}
	family, verb, ok := strings.Cut(a, ".")
	if ok && family+"." == SignalPrefix && validToken(verb) {
		return nil
	}
	if ok && verb == "*" && slices.Contains(families(), family) {
		return nil
	}
	known := append(append([]string{}, Actions...), SignalPrefix+"<kind>")
	for _, f := range families() {
		known = append(known, f+".*")
	}
	best, bestD := "", 4
	for _, k := range known {
		if d := spelling.Distance(a, k); d < bestD {
			best, bestD = k, d
		}
	}
	hint := ""
	if best != "" {
		hint = fmt.Sprintf("; did you mean %q?", best)
	}
	return fmt.Errorf("%w: unknown action %q%s (known: %s)", ErrFilter, a, hint, strings.Join(known, ", "))
}

func families() []string {
	out := []string{strings.TrimSuffix(SignalPrefix, ".")}
	for _, a := range Actions {
		f, _, _ := strings.Cut(a, ".")
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// validToken is a NATS subject token an action can have.
func validToken(s string) bool {
	return s != "" && !strings.ContainsAny(s, " .*>\t\r\n")
}

// Query reads the entries matching f, oldest first.
func (l *Log) Query(ctx context.Context, f Filter) ([]Entry, error) {
	if f.Limit <= 0 {
		f.Limit = 1000
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if !f.Since.IsZero() {
		since := f.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	for _, a := range f.Actions {
		if err := CheckAction(a); err != nil {
			return nil, err
		}
		// A family's * is one subject token: prflow.audit.webhook.* holds every webhook action.
		cfg.FilterSubjects = append(cfg.FilterSubjects, subjectPrefix+a)
	}
	s, err := l.JS.Stream(ctx, Stream)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	last := info.State.LastSeq
	out := []Entry{}
	if info.State.Msgs == 0 {
		return out, nil
	}
	cons, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
			return out, nil // nothing more matches
		}
		if err != nil {
			return nil, fmt.Errorf("audit: read: %w", err)
		}
		md, _ := msg.Metadata()
		var e Entry
		if json.Unmarshal(msg.Data(), &e) == nil && match(e, f) {
			if md != nil {
				e.Seq = md.Sequence.Stream
			}
			out = append(out, e)
			if len(out) > f.Limit {
				out = out[1:]
			}
		}
		if md == nil || md.Sequence.Stream >= last || md.NumPending == 0 {
			return out, nil
		}
	}
}

func match(e Entry, f Filter) bool {
	return (f.Actor == "" || e.Actor == f.Actor) &&
		(f.Run == "" || e.Run == f.Run || slices.Contains(e.Runs, f.Run)) &&
		(f.Remote == "" || e.Remote == f.Remote || Host(e.Remote) == f.Remote) &&
		(f.Since.IsZero() || !e.Time.Before(f.Since))
}

// Host is the host part of a host:port remote address (the address itself when it has no
// port).
func Host(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}
