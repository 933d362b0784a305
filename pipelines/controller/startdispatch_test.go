package controller

import (
	"context"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
)

// Start waits for the run to be stored, not for its first jobs' acks: those are sent before
// Start returns and confirmed in the background, and a job the jobs stream did not take (it
// has no leader for a moment, here it is gone) is sent again until it does. Before, Start
// waited for the publish, so a stream without a leader held every start for as long as the
// caller's context allowed, and then the job was only logged as lost.
func TestStartDoesNotWaitForItsFirstJobsAcks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	defer e.stop()
	bg := context.Background()
	jobs, err := e.conn.JS.Stream(bg, queue.StreamJobs)
	if err != nil {
		t.Fatal(err)
	}
	cfg := jobs.CachedInfo().Config
	if err := e.conn.JS.DeleteStream(bg, queue.StreamJobs); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	r, err := e.ctl.Start(ctx, StartRequest{File: "a.yaml", Source: []byte(noopPipeline("a", 1))})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Start returned only when its context ended: it waited for the job's publish")
	}
	stored, err := e.ctl.Get(bg, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st := stored.Stages[0].Steps[0]; st.Status != pipelines.StQueued {
		t.Fatalf("step n0 is %s, want queued", st.Status)
	}
	// The stream comes back (as after an election): the job is stored without a restart.
	s, err := e.conn.JS.CreateStream(bg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := s.Info(bg)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run's first job never reached the jobs stream (%d messages)", info.State.Msgs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	m, err := s.GetLastMsgForSubject(bg, "prflow.jobs.>")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get("Nats-Msg-Id"); got != r.ID+"/s/n0/1/0" {
		t.Errorf("job id %q, want %q", got, r.ID+"/s/n0/1/0")
	}
}
