package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Client talks to agents for steps: requests over NATS, app status from the prflow-apps KV.
// It is safe for concurrent use.
type Client struct {
	nc     *nats.Conn
	apps   jetstream.KeyValue
	agents jetstream.KeyValue
	// Timeout bounds one request when ctx has no earlier deadline (default 30s; a sync of
	// many apps gets 200ms more per app).
	Timeout time.Duration
	// Recheck is how long a seen registration is trusted before prflow-agents is read again
	// (default 5s). NATS itself answers "no responders" at once for an agent with no listener.
	Recheck time.Duration

	mu   sync.Mutex
	seen map[string]time.Time
}

// NewClient builds a client. apps and agents are the prflow-apps and prflow-agents buckets
// (queue.Buckets.Apps and .Agents).
func NewClient(nc *nats.Conn, apps, agents jetstream.KeyValue) *Client {
	return &Client{nc: nc, apps: apps, agents: agents, Timeout: 30 * time.Second, Recheck: 5 * time.Second, seen: map[string]time.Time{}}
}

// Sync asks agentID to sync req.Apps. A request-level failure is returned as error; per-app
// failures are in the results.
func (c *Client) Sync(ctx context.Context, agentID string, req SyncRequest) (*SyncReply, error) {
	if len(req.Apps) == 0 {
		return nil, &Error{Code: CodeInvalid, Agent: agentID, Message: "sync: no apps given"}
	}
	req.V = Version
	var rep SyncReply
	extra := time.Duration(len(req.Apps)) * 200 * time.Millisecond
	if err := c.ask(ctx, agentID, "sync", req, &rep, extra, func() *Error { return rep.Error }); err != nil {
		return nil, err
	}
	for i := range rep.Results {
		if rep.Results[i].Error != nil {
			rep.Results[i].Error = withAgent(rep.Results[i].Error, agentID)
		}
	}
	return &rep, nil
}

// Apps lists the agent's apps that match q.
func (c *Client) Apps(ctx context.Context, agentID string, q AppsQuery) ([]AppStatus, error) {
	q.V = Version
	var rep AppsReply
	if err := c.ask(ctx, agentID, "apps", q, &rep, 0, func() *Error { return rep.Error }); err != nil {
		return nil, err
	}
	return rep.Apps, nil
}

// Get reads one app through the agent, refreshing it first when asked.
func (c *Client) Get(ctx context.Context, agentID, app string, refresh Refresh) (*AppStatus, error) {
	var rep GetReply
	if err := c.ask(ctx, agentID, "get", GetRequest{V: Version, App: app, Refresh: refresh}, &rep, 0, func() *Error { return rep.Error }); err != nil {
		return nil, err
	}
	if rep.App == nil {
		return nil, &Error{Code: CodeInternal, Agent: agentID, App: app, Message: "get: empty reply"}
	}
	return rep.App, nil
}

// RefreshAppSets asks agentID to make its backend re-read git for the ApplicationSets req
// selects. An agent that cannot do it answers ErrUnsupported.
func (c *Client) RefreshAppSets(ctx context.Context, agentID string, req RefreshRequest) (*RefreshReply, error) {
	req.V = Version
	var rep RefreshReply
	if err := c.ask(ctx, agentID, "refresh", req, &rep, 0, func() *Error { return rep.Error }); err != nil {
		return nil, err
	}
	return &rep, nil
}

// Status reads an app's record from prflow-apps (no request to the agent). A missing record
// is ErrNotFound; a tombstone (the agent saw the app deleted) is ErrDeleted, which also
// matches ErrNotFound and says when (see DeletedErr).
func (c *Client) Status(ctx context.Context, agentID, app string) (*AppStatus, error) {
	e, err := c.apps.Get(ctx, StatusKey(agentID, app))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, &Error{Code: CodeNotFound, Agent: agentID, App: app, Message: "no status reported for this app (prflow-apps key " + StatusKey(agentID, app) + ")"}
	}
	if err != nil {
		return nil, fmt.Errorf("read status of %s/%s: %w", agentID, app, err)
	}
	var s AppStatus
	if err := DecodeStatus(e.Value(), &s); err != nil {
		return nil, fmt.Errorf("status of %s/%s: %w", agentID, app, err)
	}
	if s.Gone() {
		return nil, DeletedErr(&s)
	}
	return &s, nil
}

// DeletedErr is the ErrDeleted of a tombstone: "app X was deleted at T (reason)".
func DeletedErr(s *AppStatus) *Error {
	msg := "app " + s.Ref() + " was deleted"
	if d := s.Deleted; d != nil {
		msg += " at " + d.At.UTC().Format(time.RFC3339)
		if d.Reason != "" {
			msg += " (" + d.Reason + ")"
		}
	}
	return &Error{Code: CodeDeleted, Agent: s.Agent, App: s.Ref(), Message: msg}
}

// DecodeStatus parses a prflow-apps record and checks its version.
func DecodeStatus(b []byte, s *AppStatus) error {
	if err := json.Unmarshal(b, s); err != nil {
		return &Error{Code: CodeInternal, Message: "app status record: " + err.Error()}
	}
	if s.V != Version {
		return &Error{Code: CodeVersion, Message: fmt.Sprintf("app status record has protocol version %d, this prflow reads %d", s.V, Version)}
	}
	return nil
}

// Registered returns the live registrations of agentID's replicas, or ErrOffline naming the
// agent when there is none.
func (c *Client) Registered(ctx context.Context, agentID string) ([]Registration, error) {
	lister, err := c.agents.ListKeysFiltered(ctx, Token(agentID)+".*")
	if err != nil {
		return nil, fmt.Errorf("read prflow-agents: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	var out []Registration
	for _, k := range keys {
		e, err := c.agents.Get(ctx, k)
		if err != nil {
			continue // expired between list and get
		}
		var r Registration
		if json.Unmarshal(e.Value(), &r) == nil && r.Agent == agentID {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, offline(agentID, "no replica is registered in prflow-agents (none has sent a heartbeat in the last 30s)")
	}
	return out, nil
}

func offline(agentID, why string) *Error {
	return &Error{Code: CodeOffline, Agent: agentID,
		Message: fmt.Sprintf("agent is offline: %s; is `prflow agent --agent-id %s` running and connected to this NATS?", why, agentID)}
}

func (c *Client) checkRegistered(ctx context.Context, agentID string) error {
	c.mu.Lock()
	at, ok := c.seen[agentID]
	c.mu.Unlock()
	if ok && time.Since(at) < c.Recheck {
		return nil
	}
	if _, err := c.Registered(ctx, agentID); err != nil {
		return err
	}
	c.mu.Lock()
	c.seen[agentID] = time.Now()
	c.mu.Unlock()
	return nil
}

func (c *Client) forget(agentID string) {
	c.mu.Lock()
	delete(c.seen, agentID)
	c.mu.Unlock()
}

// request sends one versioned request and decodes the reply into out.
func (c *Client) request(ctx context.Context, agentID, kind string, in, out any, extra time.Duration) error {
	if agentID == "" {
		return &Error{Code: CodeInvalid, Message: kind + ": no agent given"}
	}
	if err := c.checkRegistered(ctx, agentID); err != nil {
		return err
	}
	data, err := json.Marshal(in)
	if err != nil {
		return &Error{Code: CodeInvalid, Agent: agentID, Message: kind + ": " + err.Error()}
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	rctx, cancel := context.WithTimeout(ctx, timeout+extra)
	defer cancel()
	msg, err := c.nc.RequestWithContext(rctx, Subject(agentID, kind), data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		c.forget(agentID)
		return offline(agentID, "registered, but no replica listens on "+Subject(agentID, kind))
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		if ctx.Err() != nil {
			return fmt.Errorf("agent %s %s: %w", agentID, kind, ctx.Err())
		}
		return &Error{Code: CodeTimeout, Agent: agentID, Message: fmt.Sprintf("%s: no reply within %s", kind, timeout+extra)}
	case err != nil:
		return &Error{Code: CodeInternal, Agent: agentID, Message: kind + ": " + err.Error()}
	}
	var head struct {
		V     int    `json:"v"`
		Error *Error `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &head); err != nil {
		return &Error{Code: CodeInternal, Agent: agentID, Message: fmt.Sprintf("%s: undecodable reply: %v", kind, err)}
	}
	if head.V != Version {
		if head.Error != nil {
			return withAgent(head.Error, agentID)
		}
		return &Error{Code: CodeVersion, Agent: agentID, Message: fmt.Sprintf("%s: reply has protocol version %d, this prflow speaks %d", kind, head.V, Version)}
	}
	if err := json.Unmarshal(msg.Data, out); err != nil {
		return &Error{Code: CodeInternal, Agent: agentID, Message: fmt.Sprintf("%s: undecodable reply: %v", kind, err)}
	}
	return nil
}

// ask is request for a call whose reply carries the agent's own error (read by replyErr once
// the reply is decoded): that error is the call's error, naming agentID.
func (c *Client) ask(ctx context.Context, agentID, kind string, in, out any, extra time.Duration, replyErr func() *Error) error {
	if err := c.request(ctx, agentID, kind, in, out, extra); err != nil {
		return err
	}
	if e := replyErr(); e != nil {
		return withAgent(e, agentID)
	}
	return nil
}

func withAgent(e *Error, agentID string) *Error {
	c := *e
	if c.Agent == "" {
		c.Agent = agentID
	}
	return &c
}

// View says whether an agent's records in prflow-apps can be decided on now.
type View struct {
	Agent string
	// Fresh: a live (registered, not expired) leader replica reports a current view of its
	// backend. When false, Since and Reason say since when and why not.
	Fresh  bool
	Since  time.Time
	Reason string
}

// Describe is "agent X cannot see Argo CD since T (reason)" for a view that is not fresh.
func (v View) Describe() string {
	if v.Fresh {
		return "agent " + v.Agent + " sees its backend"
	}
	since := ""
	if !v.Since.IsZero() {
		since = " since " + v.Since.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("agent %s cannot see Argo CD%s (%s)", v.Agent, since, v.Reason)
}

// RecordView combines an agent's view with one record: a record the agent marked stale is not
// fresh even when the agent has recovered but not rewritten it yet.
func RecordView(v View, st *AppStatus) View {
	if !v.Fresh || st == nil || st.Stale == nil {
		return v
	}
	return View{Agent: v.Agent, Since: st.Stale.Since, Reason: "its record of " + st.Ref() + " is stale: " + st.Stale.Reason}
}

// View reads agentID's registrations and says whether its app records are current: some
// replica's registration is live (not expired), it is the leader, healthy, and not stale.
func (c *Client) View(ctx context.Context, agentID string) View {
	return viewOf(agentID, c.registrations(ctx, agentID), time.Now())
}

type regsOrErr struct {
	regs []Registration
	err  error
}

func (c *Client) registrations(ctx context.Context, agentID string) regsOrErr {
	regs, err := c.Registered(ctx, agentID)
	return regsOrErr{regs, err}
}

func viewOf(agentID string, r regsOrErr, now time.Time) View {
	v := View{Agent: agentID}
	if r.err != nil {
		var e *Error
		if errors.As(r.err, &e) && e.Code == CodeOffline {
			v.Reason = "no replica of the agent is registered in prflow-agents"
		} else {
			v.Reason = "cannot read prflow-agents: " + r.err.Error()
		}
		return v
	}
	var leader *Registration
	var newest time.Time
	for i := range r.regs {
		g := &r.regs[i]
		exp := g.Expires
		if exp.IsZero() {
			exp = g.Seen.Add(registrationTTL)
		}
		if g.Seen.After(newest) {
			newest = g.Seen
		}
		if now.After(exp) || !g.Leader {
			continue
		}
		if leader == nil || g.Seen.After(leader.Seen) {
			leader = g
		}
	}
	switch {
	case leader == nil && newest.IsZero():
		v.Reason = "no replica of the agent is registered in prflow-agents"
	case leader == nil:
		v.Reason = "no live replica holds the leader lease (the last one was seen " + newest.UTC().Format(time.RFC3339) + "; failover in progress?)"
	case !leader.Healthy:
		v.Since, v.Reason = leader.StaleSince, "leader "+leader.Replica+": "+orUnknown(leader.Problem)
	case leader.Stale:
		v.Since, v.Reason = leader.StaleSince, "leader "+leader.Replica+" is re-reading its backend: "+orUnknown(leader.Problem)
	default:
		v.Fresh = true
	}
	return v
}

// registrationTTL is how long a registration without Expires is trusted after Seen (the
// prflow-agents bucket's TTL).
const registrationTTL = 30 * time.Second

func orUnknown(s string) string {
	if s == "" {
		return "no reason reported"
	}
	return s
}
