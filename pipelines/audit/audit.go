// Package audit keeps an append-only log of what people and systems did (run started, policy
// denied, cancelled, approved, …) in the JetStream stream PRFLOW_AUDIT: who, when, what, on
// which run, from where. Entries carry names, never secrets.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream and subject prefix of the audit log; the subject is prflow.audit.<action>.
const (
	Stream        = "PRFLOW_AUDIT"
	subjectPrefix = "prflow.audit."
	// DefaultRetention is how long entries are kept unless --audit-retention says otherwise.
	DefaultRetention = 90 * 24 * time.Hour
)

// Actions recorded.
const (
	RunStarted   = "run.started"
	PolicyDenied = "policy.denied"
	RunCancelled = "run.cancelled"
	// ApprovalApproved and ApprovalRejected are decisions sent to an Approval step.
	ApprovalApproved = "approval.approved"
	ApprovalRejected = "approval.rejected"
)

// Entry is one audit record.
type Entry struct {
	Seq    uint64    `json:"seq,omitempty"` // stream sequence, set when read
	Time   time.Time `json:"time"`
	Actor  string    `json:"actor"`            // a user name or a system (webhook:github)
	Action string    `json:"action"`           // run.started, policy.denied, …
	Run    string    `json:"run,omitempty"`    // the run it concerns
	Remote string    `json:"remote,omitempty"` // where the request came from
	Detail string    `json:"detail,omitempty"` // what was decided, for people
}

// Setup creates (or updates) the audit stream with the given retention.
func Setup(ctx context.Context, js jetstream.JetStream, replicas int, retention time.Duration) error {
	if replicas <= 0 {
		replicas = 1
	}
	if retention <= 0 {
		retention = DefaultRetention
	}
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: Stream, Subjects: []string{subjectPrefix + ">"},
		Retention: jetstream.LimitsPolicy, MaxAge: retention, Storage: jetstream.FileStorage, Replicas: replicas,
		Description: "audit log: who did what, when, from where"})
	if err != nil {
		return fmt.Errorf("create stream %s: %w", Stream, err)
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
	if e.Action == "" || strings.ContainsAny(e.Action, " *>") {
		return fmt.Errorf("audit: bad action %q", e.Action)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if _, err := l.JS.Publish(ctx, subjectPrefix+e.Action, b); err != nil {
		return fmt.Errorf("audit: append %s: %w", e.Action, err)
	}
	return nil
}

// Filter selects entries; zero fields match everything.
type Filter struct {
	Since  time.Time
	Actor  string
	Action string
	Run    string
	Limit  int // at most this many, the newest last; 0 = 1000
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
	if f.Action != "" {
		cfg.FilterSubjects = []string{subjectPrefix + f.Action}
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
	return (f.Actor == "" || e.Actor == f.Actor) && (f.Run == "" || e.Run == f.Run) &&
		(f.Action == "" || e.Action == f.Action) && (f.Since.IsZero() || !e.Time.Before(f.Since))
}
