package scmtest

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Fault describes how the next matching requests misbehave. A fault with Status 0 and Drop false
// only delays the request (Delay) and then serves it normally.
type Fault struct {
	Method      string            // "" matches any method
	PathPattern string            // regexp matched against the request path (decoded or escaped); "" matches all
	Status      int               // answer with this status instead of serving the request
	Header      map[string]string // extra response headers for the faulted answer
	Body        string            // response body for the faulted answer
	Times       int               // how many matching requests it hits; 0 = until ClearFaults
	Delay       time.Duration     // wait this long first (honours the request's context)
	Drop        bool              // close the connection without answering
}

// Call is one request a server received.
type Call struct {
	Method  string
	Path    string // escaped path, e.g. /api/v4/projects/group%2Fproj
	Query   string
	Status  int
	Faulted bool // answered by an injected fault
	Time    time.Time
}

// CountCalls counts the calls that match (an answer's status, a method, a fault).
func CountCalls(calls []Call, match func(Call) bool) int {
	n := 0
	for _, c := range calls {
		if match(c) {
			n++
		}
	}
	return n
}

type activeFault struct {
	f    Fault
	re   *regexp.Regexp
	left int // remaining hits; <0 = unlimited
	// build, when set, produces the answer at serve time (rate limits with a fresh reset time).
	build func() (int, map[string]string, string)
}

// middleware injects faults, records calls and adds headers every response carries.
type middleware struct {
	mu       sync.Mutex
	faults   []*activeFault
	calls    []Call
	decorate func(w http.ResponseWriter, r *http.Request) // may be nil
}

func (m *middleware) inject(f Fault, build func() (int, map[string]string, string)) error {
	af := &activeFault{f: f, left: -1, build: build}
	if f.Times > 0 {
		af.left = f.Times
	}
	if f.Times < 0 {
		return fmt.Errorf("%w: Fault.Times %d is negative", ErrInvalid, f.Times)
	}
	if f.PathPattern != "" {
		re, err := regexp.Compile(f.PathPattern)
		if err != nil {
			return fmt.Errorf("%w: Fault.PathPattern %q: %v", ErrInvalid, f.PathPattern, err)
		}
		af.re = re
	}
	if f.Status != 0 && (f.Status < 100 || f.Status > 999) {
		return fmt.Errorf("%w: Fault.Status %d", ErrInvalid, f.Status)
	}
	m.mu.Lock()
	m.faults = append(m.faults, af)
	m.mu.Unlock()
	return nil
}

func (m *middleware) clear() {
	m.mu.Lock()
	m.faults = nil
	m.mu.Unlock()
}

// take returns the first fault matching r and consumes one of its hits.
func (m *middleware) take(r *http.Request) *activeFault {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, af := range m.faults {
		if af.f.Method != "" && !strings.EqualFold(af.f.Method, r.Method) {
			continue
		}
		if af.re != nil && !af.re.MatchString(r.URL.Path) && !af.re.MatchString(r.URL.EscapedPath()) {
			continue
		}
		if af.left > 0 {
			af.left--
			if af.left == 0 {
				m.faults = append(m.faults[:i:i], m.faults[i+1:]...)
			}
		}
		return af
	}
	return nil
}

func (m *middleware) record(c Call) {
	m.mu.Lock()
	m.calls = append(m.calls, c)
	m.mu.Unlock()
}

func (m *middleware) snapshot() []Call {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Call(nil), m.calls...)
}

func (m *middleware) reset() {
	m.mu.Lock()
	m.calls = nil
	m.mu.Unlock()
}

// statusWriter remembers the status code the handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (m *middleware) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call := Call{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Time: time.Now()}
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			call.Status = sw.status
			m.record(call)
		}()
		af := m.take(r)
		if af != nil && af.f.Delay > 0 {
			t := time.NewTimer(af.f.Delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				call.Faulted = true
				return
			}
		}
		if af != nil && af.f.Drop {
			call.Faulted = true
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					conn.Close()
					return
				}
			}
			// Aborting the handler makes net/http close the connection without a response.
			panic(http.ErrAbortHandler)
		}
		if m.decorate != nil {
			m.decorate(sw, r)
		}
		if af != nil && (af.f.Status != 0 || af.build != nil) {
			call.Faulted = true
			status, hdr, body := af.f.Status, af.f.Header, af.f.Body
			if af.build != nil {
				status, hdr, body = af.build()
			}
			if strings.HasPrefix(strings.TrimSpace(body), "{") || strings.HasPrefix(strings.TrimSpace(body), "[") {
				sw.Header().Set("Content-Type", "application/json; charset=utf-8")
			} else if body != "" {
				sw.Header().Set("Content-Type", "text/plain; charset=utf-8")
			}
			for k, v := range hdr {
				sw.Header().Set(k, v)
			}
			sw.WriteHeader(status)
			_, _ = sw.Write([]byte(body))
			return
		}
		next.ServeHTTP(sw, r)
	})
}
