package steps

import (
	"context"
	"log/slog"
	"strings"
	"testing"
)

// recordingNotifier keeps what it was asked to send.
type recordingNotifier struct{ sent []Notification }

func (r *recordingNotifier) Channels() []string { return []string{"ops"} }
func (r *recordingNotifier) Send(_ context.Context, _ string, n Notification) error {
	r.sent = append(r.sent, n)
	return nil
}
func (r *recordingNotifier) Attempts(string) int { return 3 }

// TestNotifyInputs: a notification job's inputs are read through notifyConfig: every field
// reaches the notification, and a malformed job (a channel that is not text, a key the
// controller never sets) fails naming the input instead of sending.
func TestNotifyInputs(t *testing.T) {
	run := func(in map[string]any) (Result, *recordingNotifier) {
		t.Helper()
		n := &recordingNotifier{}
		res, err := runNotify(t.Context(), &Context{RunID: "r1", StepID: "s", Inputs: in, Log: slog.New(slog.DiscardHandler),
			Services: Services{Notify: n}})
		if err != nil {
			t.Fatalf("%v: %v", in, err)
		}
		return res, n
	}
	res, n := run(map[string]any{"channel": "ops", "event": "stage.failed", "status": "failed", "stage": "prod",
		"step": "sync", "message": "boom", "url": "https://prflow/runs/r1"})
	if res.Status != Succeeded || len(n.sent) != 1 {
		t.Fatalf("result %+v, sent %d", res, len(n.sent))
	}
	if s := n.sent[0]; s.Event != "stage.failed" || s.Status != "failed" || s.Stage != "prod" || s.Step != "sync" ||
		s.Message != "boom" || s.URL != "https://prflow/runs/r1" || s.ID != "r1/s" {
		t.Errorf("sent %+v", s)
	}
	for _, c := range []struct {
		in   map[string]any
		want string
	}{
		{map[string]any{"event": "run.started"}, "channel: required"},
		{map[string]any{"channel": "", "event": "run.started"}, "without channel or event"},
		{map[string]any{"channel": []any{"ops"}, "event": "run.started"}, "channel: want a string"},
		{map[string]any{"channel": "ops", "event": "run.started", "mesage": "x"}, "mesage: unknown input"},
	} {
		res, n := run(c.in)
		if res.Status != Failed || !strings.Contains(res.Message, c.want) || len(n.sent) != 0 {
			t.Errorf("%v: result %+v, sent %d, want a failure with %q", c.in, res, len(n.sent), c.want)
		}
	}
}
