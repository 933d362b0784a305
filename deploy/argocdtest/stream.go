package argocdtest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// event is one change of an Application, as the API server's broadcaster
// sees it.
type event struct {
	typ     string
	ns      string
	name    string
	project string
	labels  map[string]string
	rv      int64
	app     []byte
}

// watchFilter is Argo CD's isApplicationPermitted for a full-access user.
type watchFilter struct {
	name       string
	appNs      string
	projects   map[string]bool
	sel        Selector
	minVersion int64
	namespaces map[string]bool
}

func (f *watchFilter) match(ev *event) bool {
	if len(f.projects) > 0 && !f.projects[ev.project] {
		return false
	}
	if ev.rv < f.minVersion {
		return false
	}
	if f.name != "" && (ev.name != f.name || ev.ns != f.appNs) {
		return false
	}
	if !f.sel.Matches(ev.labels) {
		return false
	}
	return f.namespaces[ev.ns]
}

// subscriber is one open watch stream.
type subscriber struct {
	filter     watchFilter
	token      string // the bearer token the stream was opened with
	ch         chan *event
	drop       chan struct{}
	dropOnce   sync.Once
	revoke     chan struct{} // closed when the token is revoked (RevokeToken)
	revokeOnce sync.Once
}

// watchBuffer matches Argo CD's default ARGOCD_WATCH_API_BUFFER_SIZE.
const watchBuffer = 1000

// watchTuning lets tests make the broadcaster's drops happen on purpose.
// Guarded by Server.mu, except dropped.
type watchTuning struct {
	buffer  int           // buffer of streams opened from now on (0: watchBuffer)
	held    chan struct{} // non-nil while HoldStreams holds the streams; closed on release
	dropped atomic.Int64  // events lost to a full buffer
	waiting atomic.Int64  // streams waiting for their next event (WaitingStreams)
	// quietWhenEmpty: a stream with nothing to send writes no response headers until its
	// first event, as the real server does (Argo CD v3.2.11 with no applications answers a
	// watch with nothing at all, not even headers, until an app appears).
	quietWhenEmpty bool
}

// publish hands ev to every matching stream. Like Argo CD's broadcaster
// (server/application/broadcaster.go, notify) it never blocks the
// controller: a stream whose buffer is full loses the event, silently for
// the client. The stream is not cut and nothing on it says an event was lost;
// the server only logs a warning. Callers hold s.mu.
func (s *Server) publish(ev *event) {
	for sub := range s.subs {
		if !sub.filter.match(ev) {
			continue
		}
		select {
		case sub.ch <- ev:
		default:
			s.watch.dropped.Add(1)
			s.log.Warn("argocdtest: watch stream buffer full, event dropped", "app", ev.name, "resourceVersion", ev.rv)
		}
	}
}

// SetWatchBuffer sets the event buffer of watch streams opened from now on
// (Argo CD's ARGOCD_WATCH_API_BUFFER_SIZE, default 1000); n <= 0 restores the
// default. A small buffer makes a burst overflow it.
// QuietWhenEmpty makes watch streams opened from now on behave as the real server does when
// it has no app to send: no response headers until the first event.
func (s *Server) QuietWhenEmpty() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watch.quietWhenEmpty = true
}

func (s *Server) SetWatchBuffer(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watch.buffer = max(n, 0)
}

// HoldStreams stops every watch stream from writing until release is called,
// as a slow client or a congested network would: an idle stream takes the
// next event and waits with it, the events after it fill the buffer, and once
// the buffer is full the rest are dropped. So of a burst published while held,
// an idle stream delivers exactly the first buffer+1 events and loses the
// rest. Streams stay open.
func (s *Server) HoldStreams() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watch.held == nil {
		s.watch.held = make(chan struct{})
	}
	h := s.watch.held
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.watch.held == h {
				s.watch.held = nil
			}
			close(h)
		})
	}
}

// DroppedEvents is how many events watch streams lost to a full buffer.
func (s *Server) DroppedEvents() int64 { return s.watch.dropped.Load() }

// WaitingStreams is the number of watch streams idle, waiting for their next event. A test
// that holds the streams (HoldStreams) waits for its stream to be idle first: a stream still
// busy writing when a burst comes takes an event out of its buffer mid-burst, which leaves a
// later event in the buffer instead of a dropped one.
func (s *Server) WaitingStreams() int64 { return s.watch.waiting.Load() }

// heldStreams is the channel closed when HoldStreams' hold ends (nil: not held).
func (s *Server) heldStreams() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watch.held
}

// DropStreams abruptly closes every open watch stream (the TCP connection is
// closed without ending the chunked body, as when a proxy or the network
// fails), so clients must reconnect.
func (s *Server) DropStreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		sub.dropOnce.Do(func() { close(sub.drop) })
	}
}

// SetStreamDelay delays every event written to a watch stream by d, like a
// slow network or a buffering proxy. 0 removes the delay.
func (s *Server) SetStreamDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streamDelay = d
}

// StreamCount is the number of open watch streams.
func (s *Server) StreamCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs)
}

func projectsParam(q url.Values) []string {
	// The legacy "project" parameter wins over "projects", as in Argo CD.
	if p := nonEmpty(q["project"]); len(p) > 0 {
		return p
	}
	return nonEmpty(q["projects"])
}

func nonEmpty(vals []string) []string {
	var out []string
	for _, v := range vals {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

func isSSE(r *http.Request) bool { return r.Header.Get("Accept") == "text/event-stream" }

// writeStreamError answers a stream request that failed before its first
// message: grpc-gateway v1 writes {"error": runtimeStreamError} with the
// mapped HTTP status.
func writeStreamError(w http.ResponseWriter, r *http.Request, e *apiError) {
	status := httpStatus(e.code)
	body, _ := json.Marshal(map[string]StreamError{"error": {
		GrpcCode: e.code, HTTPCode: status, Message: e.msg, HTTPStatus: http.StatusText(status),
	}})
	if isSSE(r) {
		w.Header().Set("Content-Type", "text/event-stream")
		body = []byte("data: " + string(body) + " \n\n")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// handleWatch serves GET /api/v1/stream/applications.
func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request, _ []string) {
	if _, e := s.authenticate(r); e != nil {
		writeStreamError(w, r, e)
		return
	}
	q := r.URL.Query()
	sel, err := ParseSelector(q.Get("selector"))
	if err != nil {
		writeStreamError(w, r, errf(codeUnknown, "error parsing labels with selectors: %v", err))
		return
	}
	f := watchFilter{name: q.Get("name"), appNs: firstNonEmpty(q.Get("appNamespace"), defaultNamespace), sel: sel}
	if projects := projectsParam(q); len(projects) > 0 {
		f.projects = map[string]bool{}
		for _, p := range projects {
			f.projects[p] = true
		}
	}
	rvParam := q.Get("resourceVersion")
	if rvParam != "" {
		if v, err := strconv.ParseInt(rvParam, 10, 64); err == nil {
			f.minVersion = v
		}
	}
	fields, exclude, hasFields := fieldsParam(r)
	sub := &subscriber{drop: make(chan struct{}), revoke: make(chan struct{}),
		token: strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")}

	s.mu.Lock()
	sub.ch = make(chan *event, cmp.Or(s.watch.buffer, watchBuffer))
	if s.closed {
		s.mu.Unlock()
		writeStreamError(w, r, errf(codeUnavailable, "server is shutting down"))
		return
	}
	f.namespaces = map[string]bool{}
	for ns := range s.namespaces {
		f.namespaces[ns] = true
	}
	sub.filter = f
	// Without a resourceVersion (or when watching one app by name) the
	// stream starts with an ADDED event per matching app, sorted by
	// qualified name, taken atomically with the subscription.
	var initial []*event
	if rvParam == "" || f.name != "" {
		for _, key := range sortedKeys(s.apps) {
			st := s.apps[key]
			if ev := st.event(EventAdded); sub.filter.match(ev) {
				initial = append(initial, ev)
			}
		}
	}
	s.subs[sub] = struct{}{}
	quiet := s.watch.quietWhenEmpty && len(initial) == 0
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.subs, sub)
		s.mu.Unlock()
	}()

	sse := isSSE(r)
	if sse {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Content-Type-Options", "nosniff")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Grpc-Metadata-Content-Type", "application/grpc")
	rc := http.NewResponseController(w)
	if !quiet { // else the first Write sends the headers
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
	}

	lastByName := map[string][]byte{}
	send := func(ev *event) bool {
		if !s.waitAnswering(r.Context()) {
			return false
		}
		var buf bytes.Buffer
		buf.WriteString(`{"result":{"type":"`)
		buf.WriteString(ev.typ)
		buf.WriteString(`","application":`)
		buf.Write(ev.app)
		buf.WriteString(`}}`)
		data := buf.Bytes()
		if hasFields {
			if fb, err := filterFields(data, fields, exclude); err == nil {
				data = fb
			}
		}
		if sse {
			data = []byte("data: " + string(data) + " \n\n")
		}
		// Argo CD's stream forwarder suppresses a message identical to the
		// previous one for the same app (keyed by app name).
		if prev, ok := lastByName[ev.name]; ok && bytes.Equal(prev, data) {
			return true
		}
		lastByName[ev.name] = data
		s.mu.Lock()
		delay := s.streamDelay
		s.mu.Unlock()
		if delay > 0 && !s.sleepCtx(r.Context(), delay) {
			return false
		}
		if _, err := w.Write(append(data, '\n')); err != nil {
			return false
		}
		return rc.Flush() == nil
	}

	for _, ev := range initial {
		select {
		case <-sub.drop:
			hangUp(rc)
			return
		default:
		}
		if !send(ev) {
			return
		}
	}
	var keepalive <-chan time.Time
	if sse && s.keepalive > 0 {
		t := time.NewTicker(s.keepalive)
		defer t.Stop()
		keepalive = t.C
	}
	// waiting counts this stream in WaitingStreams while it waits for its next event.
	waiting := false
	setWaiting := func(b bool) {
		if b != waiting {
			waiting = b
			if b {
				s.watch.waiting.Add(1)
			} else {
				s.watch.waiting.Add(-1)
			}
		}
	}
	defer setWaiting(false)
	for {
		setWaiting(true)
		select {
		case ev := <-sub.ch:
			setWaiting(false)
			// While held (HoldStreams), the stream writes nothing: it keeps the event it
			// took, its buffer fills behind it.
			if held := s.heldStreams(); held != nil {
				select {
				case <-held:
				case <-sub.drop:
					hangUp(rc)
					return
				case <-r.Context().Done():
					return
				case <-s.ctx.Done():
					return
				}
			}
			if !send(ev) {
				return
			}
		case <-sub.revoke:
			// The token was revoked while the stream was open: end it with the error the
			// API answers for that token.
			e := s.revokedErr(sub.token)
			body, _ := json.Marshal(map[string]StreamError{"error": {GrpcCode: e.code, HTTPCode: httpStatus(e.code), Message: e.msg, HTTPStatus: http.StatusText(httpStatus(e.code))}})
			if sse {
				body = []byte("data: " + string(body) + " \n\n")
			}
			_, _ = w.Write(append(body, '\n'))
			_ = rc.Flush()
			return
		case <-keepalive:
			setWaiting(false)
			if !s.waitAnswering(r.Context()) {
				return
			}
			if quiet && len(lastByName) == 0 {
				continue // nothing sent yet: the real server stays silent, keepalives too
			}
			if _, err := w.Write([]byte(":\n")); err != nil {
				return
			}
			_ = rc.Flush()
		case <-sub.drop:
			hangUp(rc)
			return
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// hangUp closes the connection under a streaming response without finishing
// the chunked encoding, so the client sees an unexpected EOF.
func hangUp(rc *http.ResponseController) {
	conn, _, err := rc.Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// fieldsParam parses Argo CD's ?fields=a.b,c (keep) or ?fields=-a.b (drop).
func fieldsParam(r *http.Request) (map[string]bool, bool, bool) {
	fq := r.URL.Query().Get("fields")
	if fq == "" {
		return nil, false, false
	}
	exclude := false
	if strings.HasPrefix(fq, "-") {
		fq, exclude = fq[1:], true
	}
	fields := map[string]bool{}
	for _, f := range strings.Split(fq, ",") {
		fields[f] = true
	}
	return fields, exclude, true
}

// filterFields trims a JSON document like argoproj/pkg's grpc/http
// forwarders: a kept field keeps its whole subtree, a parent is kept when a
// requested path starts with its path (a plain string prefix, as upstream).
// The result's object keys come out sorted, as upstream re-marshals a map.
func filterFields(data []byte, fields map[string]bool, exclude bool) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	processItem(nil, v, fields, exclude)
	return json.Marshal(v)
}

func processItem(path []string, item any, fields map[string]bool, exclude bool) {
	switch v := item.(type) {
	case map[string]any:
		for k, val := range v {
			p := append(append([]string(nil), path...), k)
			fieldPath := strings.Join(p, ".")
			pathIn := fields[fieldPath]
			parentPathIn := pathIn
			if !parentPathIn {
				for f := range fields {
					if strings.HasPrefix(f, fieldPath) {
						parentPathIn = true
						break
					}
				}
			}
			keep := exclude && !pathIn || !exclude && parentPathIn
			if !keep {
				delete(v, k)
			} else if !pathIn {
				processItem(p, val, fields, exclude)
			}
		}
	case []any:
		for _, e := range v {
			processItem(path, e, fields, exclude)
		}
	}
}
