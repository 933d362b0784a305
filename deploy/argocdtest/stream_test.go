package argocdtest

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

func addLabelled(t *testing.T, s *Server, name string, labels map[string]string) {
	t.Helper()
	a := demoApp(name, demoRepo, "apps/demo")
	a.Metadata.Labels = labels
	if err := s.AddApp(a); err != nil {
		t.Fatal(err)
	}
}

func TestStreamStartsWithAddedAndFollowsChanges(t *testing.T) {
	s, _, _ := newFake(t)
	addLabelled(t, s, "b-dev", map[string]string{"env": "dev"})
	addLabelled(t, s, "a-dev", map[string]string{"env": "dev"})
	addLabelled(t, s, "c-prod", map[string]string{"env": "prod"})

	st := openStream(t, s, "selector=env%3Ddev", "")
	if ct := st.res.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	var names []string
	for i := 0; i < 2; i++ {
		m := st.next()
		if m.Result.Type != EventAdded {
			t.Fatalf("event %d is %s, want ADDED", i, m.Result.Type)
		}
		names = append(names, m.Result.Application.Metadata.Name)
	}
	if strings.Join(names, ",") != "a-dev,b-dev" {
		t.Fatalf("initial ADDED events %v, want sorted a-dev,b-dev", names)
	}
	if !strings.HasPrefix(st.next2raw(t, s, "c-prod", "b-dev"), `{"result":{"type":"MODIFIED","application":{"metadata":{"name":"b-dev"`) {
		t.Fatal("stream lines must be {\"result\":{\"type\":...,\"application\":...}}")
	}
	// The refresh's second event (annotation removed, status reconciled).
	st.until(func(ev ApplicationWatchEvent) bool {
		_, refreshing := ev.Application.Metadata.Annotations[refreshAnnotation]
		return ev.Application.Metadata.Name == "b-dev" && !refreshing
	})

	addLabelled(t, s, "d-dev", map[string]string{"env": "dev"})
	if m := st.next(); m.Result.Type != EventAdded || m.Result.Application.Metadata.Name != "d-dev" {
		t.Fatalf("new app: %s %s", m.Result.Type, m.Result.Application.Metadata.Name)
	}
	if m := st.next(); m.Result.Type != EventModified || m.Result.Application.Status.Sync.Status != SyncStatusOutOfSync {
		t.Fatalf("new app's first reconciliation: %s %s", m.Result.Type, state(m.Result.Application))
	}
	if err := s.DeleteApp("a-dev"); err != nil {
		t.Fatal(err)
	}
	if m := st.next(); m.Result.Type != EventDeleted || m.Result.Application.Metadata.Name != "a-dev" {
		t.Fatalf("delete: %s %s", m.Result.Type, m.Result.Application.Metadata.Name)
	}
}

// next2raw changes two apps (one outside the stream's selector) through a
// refresh and returns the next raw line, which must be about want.
func (st *stream) next2raw(t *testing.T, s *Server, other, want string) string {
	t.Helper()
	getApp(t, s, other+"?refresh=normal")
	getApp(t, s, want+"?refresh=normal")
	m := st.next()
	if m.Result.Application.Metadata.Name != want {
		t.Fatalf("got an event for %s, the selector should have filtered it", m.Result.Application.Metadata.Name)
	}
	return m.raw
}

func TestStreamResourceVersionAndName(t *testing.T) {
	s, _, _ := newFake(t)
	addDemo(t, s)
	addLabelled(t, s, "other", nil)
	a, _ := s.App("demo")

	// With a resourceVersion and no name: no initial ADDED, only newer changes.
	st := openStream(t, s, "resourceVersion="+a.Metadata.ResourceVersion, "")
	getApp(t, s, "other?refresh=normal")
	m := st.next()
	if m.Result.Type != EventModified || m.Result.Application.Metadata.Name != "other" {
		t.Fatalf("first event %s %s, want MODIFIED other (no replay)", m.Result.Type, m.Result.Application.Metadata.Name)
	}
	// With a name, ADDED is sent even with a resourceVersion (upstream never
	// lets single-app watchers miss the current state).
	st2 := openStream(t, s, "name=demo&resourceVersion="+a.Metadata.ResourceVersion, "")
	if m := st2.next(); m.Result.Type != EventAdded || m.Result.Application.Metadata.Name != "demo" {
		t.Fatalf("named watch: %s %s", m.Result.Type, m.Result.Application.Metadata.Name)
	}
	// Projects filter.
	st3 := openStream(t, s, "projects=elsewhere", "")
	getApp(t, s, "demo?refresh=normal")
	select {
	case m := <-st3.msgs:
		t.Fatalf("project filter let through %s", m.raw)
	default:
	}
	// Bad selector: a stream error, HTTP 500.
	bad := openStream(t, s, "selector=a+in+(", "")
	if bad.res.StatusCode != 500 {
		t.Fatalf("bad selector status %d", bad.res.StatusCode)
	}
	if m := bad.next(); m.Error == nil || m.Error.GrpcCode != codeUnknown || m.Error.HTTPCode != 500 ||
		!strings.HasPrefix(m.Error.Message, "error parsing labels with selectors: ") || m.Error.HTTPStatus != "Internal Server Error" {
		t.Fatalf("stream error %s", m.raw)
	}
}

func TestStreamAuthErrorShape(t *testing.T) {
	s, _, _ := newFake(t)
	for _, accept := range []string{"", "text/event-stream"} {
		r := call(t, s, "GET", "/api/v1/stream/applications", nil, "Authorization", "", "Accept", accept)
		want := `{"error":{"grpc_code":16,"http_code":401,"message":"no session information","http_status":"Unauthorized"}}`
		if accept != "" {
			want = "data: " + want + " \n\n"
		}
		if r.status != 401 || string(r.body) != want {
			t.Fatalf("accept %q: %d %q", accept, r.status, r.body)
		}
	}
}

func TestStreamSSE(t *testing.T) {
	s, _, _ := newFake(t, WithKeepalive(5*time.Millisecond))
	addDemo(t, s)
	st := openStream(t, s, "name=demo", "text/event-stream")
	if ct := st.res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	m := st.next()
	if m.Result == nil || m.Result.Type != EventAdded || !strings.HasPrefix(m.raw, `data: {"result":{"type":"ADDED"`) || !strings.HasSuffix(m.raw, "} ") {
		t.Fatalf("SSE event line %q", m.raw)
	}
	// Keepalive comment lines appear while nothing happens.
	for {
		m := st.next()
		if m.raw == ":" {
			break
		}
	}
}

func TestStreamFieldsAndDuplicateSuppression(t *testing.T) {
	s, _, _ := newFake(t)
	addDemo(t, s)
	st := openStream(t, s, "name=demo&fields=result.type,result.application.metadata.name,result.application.status.sync.status", "")
	first := st.next()
	if first.raw != `{"result":{"application":{"metadata":{"name":"demo"},"status":{"sync":{"status":"OutOfSync"}}},"type":"ADDED"}}` {
		t.Fatalf("trimmed ADDED %s", first.raw)
	}
	// Refreshes change only fields that are trimmed away: the first MODIFIED
	// goes out, identical ones after it are suppressed.
	getApp(t, s, "demo?refresh=normal")
	getApp(t, s, "demo?refresh=normal")
	call(t, s, "POST", "/api/v1/applications/demo/sync", map[string]any{})
	var lines []string
	for {
		m := st.next()
		lines = append(lines, m.raw)
		if m.Result.Application.Status.Sync.Status == SyncStatusSynced {
			break
		}
	}
	want := []string{
		`{"result":{"application":{"metadata":{"name":"demo"},"status":{"sync":{"status":"OutOfSync"}}},"type":"MODIFIED"}}`,
		`{"result":{"application":{"metadata":{"name":"demo"},"status":{"sync":{"status":"Synced"}}},"type":"MODIFIED"}}`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestDropStreamsAndReconnect(t *testing.T) {
	s, _, _ := newFake(t)
	addDemo(t, s)
	st := openStream(t, s, "name=demo", "")
	st.next()
	if n := s.StreamCount(); n != 1 {
		t.Fatalf("StreamCount = %d", n)
	}
	s.DropStreams()
	for range st.msgs {
	}
	if err := <-st.done; !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a dropped stream must end with an unexpected EOF, got %v", err)
	}
	st2 := openStream(t, s, "name=demo", "")
	if m := st2.next(); m.Result.Type != EventAdded {
		t.Fatalf("reconnect starts with ADDED, got %s", m.Result.Type)
	}
	getApp(t, s, "demo?refresh=normal")
	if m := st2.next(); m.Result.Type != EventModified {
		t.Fatalf("after reconnect: %s", m.Result.Type)
	}
}

func TestStreamDelay(t *testing.T) {
	s, _, _ := newFake(t)
	addDemo(t, s)
	st := openStream(t, s, "name=demo", "")
	st.next()
	s.SetStreamDelay(300 * time.Millisecond)
	a := getApp(t, s, "demo?refresh=normal") // the change exists once this returns
	select {
	case m := <-st.msgs:
		t.Fatalf("event arrived although the stream is delayed: %s", m.raw)
	default:
	}
	var got ApplicationWatchEvent
	for got.Application.Metadata.ResourceVersion != a.Metadata.ResourceVersion {
		got = *st.next().Result
	}
	s.SetStreamDelay(0)
}

// A burst larger than a stream's buffer loses events the way Argo CD's
// broadcaster does: silently, with the stream left open.
func TestWatchBufferOverflowDropsSilently(t *testing.T) {
	s, _, _ := newFake(t)
	s.SetWatchBuffer(5)
	st := openStream(t, s, "", "")
	// Hold an idle stream, as the agent's is between bursts (see WaitingStreams).
	for deadline := time.Now().Add(10 * time.Second); s.WaitingStreams() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("WaitingStreams = %d, want the one stream idle", s.WaitingStreams())
		}
	}
	release := s.HoldStreams()
	apps := make([]Application, 20)
	for i := range apps {
		apps[i] = demoApp(fmt.Sprintf("app-%02d", i), demoRepo, "apps/demo")
	}
	if err := s.AddApps(apps); err != nil {
		t.Fatal(err)
	}
	// 20 ADDED (and the reconciliations' MODIFIED) were published; the one
	// the stream holds and 5 in its buffer survive.
	if d := s.DroppedEvents(); d < 14 {
		t.Fatalf("DroppedEvents = %d, want >= 14", d)
	}
	release()
	for i := 0; i < 6; i++ {
		m := st.next()
		if want := fmt.Sprintf("app-%02d", i); m.Result == nil || m.Result.Type != EventAdded || m.Result.Application.Metadata.Name != want {
			t.Fatalf("event %d: %s, want ADDED %s (the buffer keeps the oldest)", i, m.raw, want)
		}
	}
	select {
	case m := <-st.msgs:
		t.Fatalf("a dropped event was delivered: %s", m.raw)
	case <-time.After(200 * time.Millisecond):
	}
	// The stream was not cut and follows later changes.
	if n := s.StreamCount(); n != 1 {
		t.Fatalf("StreamCount = %d after the overflow, want 1", n)
	}
	if err := s.DeleteApp("app-07"); err != nil {
		t.Fatal(err)
	}
	if m := st.next(); m.Result == nil || m.Result.Type != EventDeleted || m.Result.Application.Metadata.Name != "app-07" {
		t.Fatalf("after the overflow: %s, want DELETED app-07", m.raw)
	}
	// A second release is harmless; a new hold works again.
	release()
	release2 := s.HoldStreams()
	release2()
}

func TestAddAppsRejectsBadInputAtomically(t *testing.T) {
	s, _, _ := newFake(t)
	addDemo(t, s)
	for _, tc := range []struct {
		apps []Application
		want string
	}{
		{[]Application{demoApp("x", demoRepo, "apps/demo"), demoApp("", demoRepo, "apps/demo")}, "app #2: metadata.name is empty"},
		{[]Application{demoApp("y", demoRepo, "apps/demo"), demoApp("y", demoRepo, "apps/demo")}, "app #2: argocd/y is listed twice"},
		{[]Application{demoApp("z", demoRepo, "apps/demo"), demoApp("demo", demoRepo, "apps/demo")}, "argocd/demo"},
	} {
		err := s.AddApps(tc.apps)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("AddApps: %v, want an error naming %q", err, tc.want)
		}
	}
	if n := len(s.Apps()); n != 1 {
		t.Fatalf("%d apps after rejected bursts, want 1 (nothing created)", n)
	}
}
