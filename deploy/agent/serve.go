package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Handler is what an agent implementation (Argo CD bridge, simulated agent) provides; Serve
// turns NATS requests into calls and versioned replies.
type Handler interface {
	Sync(ctx context.Context, req SyncRequest) ([]SyncResult, error)
	Apps(ctx context.Context, q AppsQuery) ([]AppStatus, error)
	Get(ctx context.Context, req GetRequest) (*AppStatus, error)
}

// AppSetRefresher is implemented by handlers that can make their backend re-read git for
// ApplicationSets (request kind "refresh"); others answer CodeUnsupported.
type AppSetRefresher interface {
	RefreshAppSets(ctx context.Context, req RefreshRequest) (*RefreshReply, error)
}

// ServeOptions tune Serve.
type ServeOptions struct {
	// Concurrency is how many requests are handled at once (default 16).
	Concurrency int
	// Timeout bounds the handling of one request (default 60s).
	Timeout time.Duration
	Log     *slog.Logger
}

// Serve answers agentID's requests with h until ctx ends. It returns once subscribed; wait
// blocks until ctx ended and in-flight requests were answered. All replicas of one agent
// subscribe in one queue group, so each request is handled by exactly one of them.
func Serve(ctx context.Context, nc *nats.Conn, agentID string, h Handler, o ServeOptions) (wait func(), err error) {
	if o.Concurrency <= 0 {
		o.Concurrency = 16
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	sem := make(chan struct{}, o.Concurrency)
	var wg sync.WaitGroup
	var mu sync.Mutex
	closed := false
	handle := func(m *nats.Msg) {
		kind := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		mu.Lock()
		if closed {
			mu.Unlock()
			return
		}
		wg.Add(1)
		mu.Unlock()
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			rctx, cancel := context.WithTimeout(ctx, o.Timeout)
			defer cancel()
			reply := dispatch(rctx, h, kind, m.Data, agentID)
			b, err := json.Marshal(reply)
			if err != nil {
				b, _ = json.Marshal(map[string]any{"v": Version, "error": Errorf(CodeInternal, "encode reply: %v", err)})
			}
			if err := m.Respond(b); err != nil && ctx.Err() == nil {
				o.Log.Warn("agent: reply failed", "subject", m.Subject, "err", err)
			}
		}()
	}
	sub, err := nc.QueueSubscribe("prflow.agent."+Token(agentID)+".*", QueueGroup(agentID), handle)
	if err != nil {
		return nil, fmt.Errorf("agent %s: subscribe to requests: %w", agentID, err)
	}
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("agent %s: subscribe to requests: %w", agentID, err)
	}
	done := make(chan struct{})
	go func() {
		<-ctx.Done()
		_ = sub.Unsubscribe()
		mu.Lock()
		closed = true
		mu.Unlock()
		wg.Wait()
		close(done)
	}()
	return func() { <-done }, nil
}

func dispatch(ctx context.Context, h Handler, kind string, data []byte, agentID string) any {
	fail := func(err error) *Error {
		e := AsError(err)
		if e.Agent == "" {
			e.Agent = agentID
		}
		return e
	}
	var head struct {
		V int `json:"v"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return map[string]any{"v": Version, "error": fail(Errorf(CodeInvalid, "%s: request is not JSON: %v", kind, err))}
	}
	if head.V != Version {
		return map[string]any{"v": Version, "error": fail(Errorf(CodeVersion, "%s: request has protocol version %d, agent speaks %d", kind, head.V, Version))}
	}
	switch kind {
	case "sync":
		var req SyncRequest
		if err := json.Unmarshal(data, &req); err != nil {
			return SyncReply{V: Version, Error: fail(Errorf(CodeInvalid, "sync: %v", err))}
		}
		if len(req.Apps) == 0 {
			return SyncReply{V: Version, Error: fail(Errorf(CodeInvalid, "sync: no apps given"))}
		}
		res, err := h.Sync(ctx, req)
		if err != nil {
			return SyncReply{V: Version, Error: fail(err)}
		}
		return SyncReply{V: Version, Results: res}
	case "apps":
		var q AppsQuery
		if err := json.Unmarshal(data, &q); err != nil {
			return AppsReply{V: Version, Error: fail(Errorf(CodeInvalid, "apps: %v", err))}
		}
		apps, err := h.Apps(ctx, q)
		if err != nil {
			return AppsReply{V: Version, Error: fail(err)}
		}
		return AppsReply{V: Version, Apps: apps}
	case "get":
		var req GetRequest
		if err := json.Unmarshal(data, &req); err != nil {
			return GetReply{V: Version, Error: fail(Errorf(CodeInvalid, "get: %v", err))}
		}
		if req.App == "" {
			return GetReply{V: Version, Error: fail(Errorf(CodeInvalid, "get: no app given"))}
		}
		app, err := h.Get(ctx, req)
		if err != nil {
			e := fail(err)
			if e.App == "" {
				e.App = req.App
			}
			return GetReply{V: Version, Error: e}
		}
		return GetReply{V: Version, App: app}
	case "refresh":
		var req RefreshRequest
		if err := json.Unmarshal(data, &req); err != nil {
			return RefreshReply{V: Version, Error: fail(Errorf(CodeInvalid, "refresh: %v", err))}
		}
		r, ok := h.(AppSetRefresher)
		if !ok {
			return RefreshReply{V: Version, Error: fail(Errorf(CodeUnsupported, "refresh: this agent cannot refresh ApplicationSets"))}
		}
		rep, err := r.RefreshAppSets(ctx, req)
		if err != nil {
			return RefreshReply{V: Version, Error: fail(err)}
		}
		rep.V = Version
		return rep
	case "update":
		return dispatchUpdate(ctx, h, data, fail)
	case "diff":
		return dispatchDiff(ctx, h, data, fail)
	}
	return map[string]any{"v": Version, "error": fail(Errorf(CodeInvalid, "unknown request kind %q (want sync, apps, get, refresh, update or diff)", kind))}
}

// Heartbeat registers reg in prflow-agents (kv) under RegistrationKey before it returns, then
// renews it every `every` (default a third of the 30s TTL) until ctx ends, and finally removes
// the key; done is closed then. reg is called each time so the record shows current leadership
// and health.
func Heartbeat(ctx context.Context, kv jetstream.KeyValue, every time.Duration, reg func() Registration, log *slog.Logger) (done <-chan struct{}, err error) {
	return HeartbeatKick(ctx, kv, every, reg, log, nil)
}

// HeartbeatKick is Heartbeat that also re-registers at once whenever kick receives, so a
// change of leadership, health or app count is visible right away rather than at the next
// tick. Each registration says it expires three heartbeats after it was written.
func HeartbeatKick(ctx context.Context, kv jetstream.KeyValue, every time.Duration, reg func() Registration, log *slog.Logger, kick <-chan struct{}) (done <-chan struct{}, err error) {
	if every <= 0 {
		every = 10 * time.Second
	}
	put := func() (string, error) {
		r := reg()
		r.V = Version
		r.Seen = time.Now().UTC()
		r.Expires = r.Seen.Add(3 * every)
		b, _ := json.Marshal(r)
		key := RegistrationKey(r.Agent, r.Replica)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := kv.Put(pctx, key, b)
		return key, err
	}
	key, err := put()
	if err != nil {
		return nil, fmt.Errorf("register agent in prflow-agents: %w", err)
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = kv.Delete(dctx, key)
				cancel()
				return
			case <-t.C:
			case <-kick:
				t.Reset(every)
			}
			k, err := put()
			if err != nil && ctx.Err() == nil && log != nil {
				log.Warn("agent heartbeat failed", "err", err)
			}
			if err == nil {
				key = k
			}
		}
	}()
	return ch, nil
}
