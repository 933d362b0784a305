package ui

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
)

// sse is a server-sent events writer.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func startSSE(w http.ResponseWriter) (*sse, bool) {
	f, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming not supported by this connection", http.StatusInternalServerError)
		return nil, false
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy must not hold events back
	w.WriteHeader(http.StatusOK)
	f.Flush()
	return &sse{w: w, f: f}, true
}

// send writes one event; data may span lines (each becomes a data: line).
func (s *sse) send(event, data string) error {
	var b strings.Builder
	b.WriteString("event: " + event + "\n")
	for _, l := range strings.Split(data, "\n") {
		b.WriteString("data: " + l + "\n")
	}
	b.WriteString("\n")
	if _, err := s.w.Write([]byte(b.String())); err != nil {
		return err
	}
	s.f.Flush()
	return nil
}

// keepalive writes a comment line: proxies drop streams that stay idle.
func (s *sse) keepalive() error {
	if _, err := s.w.Write([]byte(": keepalive\n\n")); err != nil {
		return err
	}
	s.f.Flush()
	return nil
}

// runEvents pushes the run page's body, re-rendered, on every change of the run's KV entry
// (a watch on its key: the page holds no timer and polls nothing). It ends with an "end"
// event once the run has finished.
func (u *UI) runEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx := r.Context()
	if _, ok := u.readableRun(w, r, true); !ok { // rbac.go
		return
	}
	watch, err := u.ctl.Buckets().Runs.Watch(ctx, id)
	if err != nil {
		http.Error(w, "watch run "+id+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer func() { _ = watch.Stop() }()
	out, ok := startSSE(w)
	if !ok {
		return
	}
	s := sessionFrom(ctx)
	// App status changes (sync, health, deployed revision) of the run's apps re-render too:
	// the controller's one watch of prflow-apps, filtered on the run's app keys.
	apps := u.ctl.SubscribeApps()
	defer apps.Close()
	var last *pipelines.Run
	push := func(run *pipelines.Run) bool {
		var b strings.Builder
		if err := u.tmpl.ExecuteTemplate(&b, "runbody", u.runView(ctx, run, s)); err != nil {
			_ = out.send("problem", "rendering run "+id+": "+err.Error())
			return false
		}
		return out.send("run", b.String()) == nil
	}
	keepalive := time.NewTicker(25 * time.Second) // proxies drop idle streams
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-keepalive.C:
			if out.keepalive() != nil {
				return
			}
		case <-apps.Changes():
			drain(apps.Changes()) // one render for a burst
			if last != nil && !push(last) {
				return
			}
		case <-apps.Resync():
			// Changes were dropped (this page fell behind, or NATS reconnected): read the
			// run again and render it with the app status as it is now.
			drain(apps.Changes())
			cur, err := u.ctl.Get(ctx, id)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				_ = out.send("problem", "reading run "+id+" again: "+err.Error())
				continue
			}
			last = cur
			apps.SetKeys(runAppKeys(cur))
			if !push(cur) {
				return
			}
		case e, ok := <-watch.Updates():
			if !ok {
				_ = out.send("problem", "the watch of run "+id+" ended: reload the page")
				return
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var run pipelines.Run
			if err := json.Unmarshal(e.Value(), &run); err != nil {
				_ = out.send("problem", "unreadable state of run "+id+": "+err.Error())
				continue
			}
			last = &run
			apps.SetKeys(runAppKeys(&run))
			if !push(&run) {
				return
			}
			if run.Status.Terminal() {
				_ = out.send("end", string(run.Status))
				return
			}
		}
	}
}

// drain empties ch of what is already queued.
func drain(ch <-chan string) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// runAppKeys are the prflow-apps keys of the apps a run's steps found.
func runAppKeys(r *pipelines.Run) map[string]bool {
	keys := map[string]bool{}
	for _, sr := range r.Stages {
		for _, a := range stageAppRefs(sr) {
			keys[agent.StatusKey(a.agent, a.name)] = true
		}
	}
	return keys
}

// logLine is what the page gets per step log line.
type logLine struct {
	Time  string `json:"time"`
	Level string `json:"level"`
	Step  string `json:"step"`
	Text  string `json:"text"`
}

// runLogs streams the run's step log lines (PRFLOW_LOGS) as they are published, until the
// run has ended and the stream is drained. Lines are masked by the worker before publishing.
func (u *UI) runLogs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx := r.Context()
	run, ok := u.readableRun(w, r, true) // rbac.go
	if !ok {
		return
	}
	oc, err := u.ctl.Conn().JS.OrderedConsumer(ctx, queue.StreamLogs, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"prflow.logs." + id + ".>"}})
	if err != nil {
		http.Error(w, "read logs of run "+id+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	out, ok := startSSE(w)
	if !ok {
		return
	}
	done := run.Status.Terminal()
	for {
		msg, err := oc.Next(jetstream.FetchMaxWait(time.Second))
		if err == nil {
			var l struct {
				Time  time.Time         `json:"time"`
				Level string            `json:"level"`
				Msg   string            `json:"msg"`
				Attrs map[string]string `json:"attrs"`
				Stage string            `json:"stage"`
				Step  string            `json:"step"`
			}
			if json.Unmarshal(msg.Data(), &l) != nil {
				continue
			}
			text := l.Msg
			for _, k := range slices.Sorted(maps.Keys(l.Attrs)) {
				if k == "run" || k == "stage" || k == "step" {
					continue // the line's step says it
				}
				text += fmt.Sprintf(" %s=%s", k, l.Attrs[k])
			}
			b, _ := json.Marshal(logLine{Time: l.Time.UTC().Format("15:04:05.000"), Level: l.Level, Step: l.Stage + "." + l.Step, Text: text})
			if out.send("log", string(b)) != nil {
				return
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if done {
			_ = out.send("end", "")
			return
		}
		if cur, err := u.ctl.Get(ctx, id); err == nil && cur.Status.Terminal() {
			done = true // one more pass for lines published just before the end
		} else if out.keepalive() != nil {
			return
		}
	}
}
