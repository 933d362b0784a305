package controller

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps/envelope"
)

const multiStage = `
name: multi
inputs:
  tag: {type: string, required: true}
variables:
  image: web:${{ inputs.tag }}
stages:
  - id: build
    needs: []
    steps:
      - id: make
        type: Noop
        with: {outputs: {artifact: "${{ variables.image }}", n: 3}}
  - id: lint
    needs: []
    steps:
      - id: check
        type: Noop
        with: {outputs: {ok: true}}
  - id: deploy
    needs: [build, lint]
    steps:
      - id: flaky
        type: Flaky
        with: {failures: 2}
      - id: retried
        type: FailOnce
        onFailure: {action: retry, retries: 2, backoff: 50ms}
      - id: use
        type: Noop
        with:
          outputs:
            got: "${{ stages.build.steps.make.outputs.artifact }}"
            doubled: "${{ stages.build.steps.make.outputs.n * 2 }}"
            tries: "${{ steps.flaky.outputs.tries }}"
      - id: skipped
        type: Boom
        when: ${{ inputs.tag == "never" }}
  - id: broken
    needs: [deploy]
    steps:
      - id: fine
        type: Noop
      - id: explode
        type: Boom
      - id: never
        type: Noop
    rollbackSteps:
      - id: undo
        type: Noop
        with: {outputs: {undid: "${{ steps.fine.status }}"}}
  - id: after
    steps:
      - id: x
        type: Noop
`

func TestMultiStagePipeline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 2, tuning: queue.ConsumerTuning{AckWait: 3 * time.Second, MaxDeliver: 5}})
	r := e.startRun(multiStage, map[string]any{"tag": "1.2"})
	r = e.wait(r.ID, 60*time.Second)

	if r.Status != pipelines.StFailed || !strings.Contains(r.Error, "stage broken: step explode: boom in explode") {
		t.Fatalf("run: %s %q", r.Status, r.Error)
	}
	use := step(r, "deploy", "use")
	if use.Outputs["got"] != "web:1.2" || toInt(use.Outputs["doubled"]) != 6 || toInt(use.Outputs["tries"]) != 3 {
		t.Errorf("outputs not passed between steps/stages: %#v", use.Outputs)
	}
	if st := step(r, "deploy", "retried"); st.Status != pipelines.StSucceeded || st.Attempt != 2 {
		t.Errorf("retry strategy: %s attempt %d", st.Status, st.Attempt)
	}
	if st := step(r, "deploy", "skipped"); st.Status != pipelines.StSkipped {
		t.Errorf("when=false step: %s", st.Status)
	}
	b := r.Find("broken")
	if b.Status != pipelines.StFailed || step(r, "broken", "never").Status != pipelines.StNotRun {
		t.Errorf("failed stage: %s, never=%s", b.Status, step(r, "broken", "never").Status)
	}
	if u := step(r, "broken", "undo"); u.Status != pipelines.StSucceeded || u.Outputs["undid"] != "succeeded" {
		t.Errorf("rollback step: %s %#v", u.Status, u.Outputs)
	}
	if a := r.Find("after"); a.Status != pipelines.StNotRun || a.Error != "broken failed" {
		t.Errorf("stage after a failed stage: %s %q", a.Status, a.Error)
	}
	// build and lint have no needs: they start together, and deploy only after both ended.
	bs, ls, ds := r.Find("build"), r.Find("lint"), r.Find("deploy")
	if !bs.Started.Equal(ls.Started) || ds.Started.Before(bs.Ended) || ds.Started.Before(ls.Ended) {
		t.Errorf("stage order wrong: build %v-%v lint %v-%v deploy %v", bs.Started, bs.Ended, ls.Started, ls.Ended, ds.Started)
	}
}

func TestParkedStepsHoldNoWorker(t *testing.T) {
	t.Parallel()
	// One worker slot. 50 runs park on an approval; a 51st run must still get the worker.
	e := newEnv(t, envOpts{workers: 1, concurrency: 1})
	parkSrc := "name: parked\nstages:\n  - id: s\n    steps:\n      - id: gate\n        type: Park\n"
	var ids []string
	for i := 0; i < 50; i++ {
		ids = append(ids, e.startRun(parkSrc, nil).ID)
	}
	deadline := time.Now().Add(60 * time.Second)
	for e.ctl.metrics.Parked() < 50 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of 50 steps parked", e.ctl.metrics.Parked())
		}
		time.Sleep(50 * time.Millisecond)
	}
	other := e.startRun("name: quick\nstages:\n  - id: s\n    steps:\n      - id: a\n        type: Noop\n", nil)
	if r := e.wait(other.ID, 30*time.Second); r.Status != pipelines.StSucceeded {
		t.Fatalf("51st run: %s %s", r.Status, r.Error)
	}
	// Approve one parked run through the API; reject another.
	srv := e.serve(&Auth{Anonymous: &User{Name: "alice", Groups: []string{"release"}}})
	post := func(id, body string) {
		resp, err := http.Post(srv.URL+"/api/v1/runs/"+id+"/signals", "application/json", strings.NewReader(body))
		if err != nil || resp.StatusCode != 202 {
			t.Fatalf("signal: %v %v", err, resp.Status)
		}
		resp.Body.Close()
	}
	post(ids[0], `{"stage":"s","step":"gate","approve":true,"comment":"ok"}`)
	post(ids[1], `{"stage":"s","step":"gate","approve":false}`)
	if r := e.wait(ids[0], 30*time.Second); r.Status != pipelines.StSucceeded || step(r, "s", "gate").Outputs["approver"] != "alice" {
		t.Fatalf("approved run: %s %v", r.Status, step(r, "s", "gate").Outputs)
	}
	if r := e.wait(ids[1], 30*time.Second); r.Status != pipelines.StFailed || !strings.Contains(r.Error, "rejected by alice") {
		t.Fatalf("rejected run: %s %s", r.Status, r.Error)
	}
	// Cancel another: it ends cancelled and its step is no longer parked.
	if err := e.ctl.Cancel(context.Background(), ids[2], "bob"); err != nil {
		t.Fatal(err)
	}
	if r := e.wait(ids[2], 30*time.Second); r.Status != pipelines.StCancelled || step(r, "s", "gate").Status != pipelines.StCancelled {
		t.Fatalf("cancelled run: %s", r.Status)
	}
}

func TestWakeOnKVChangeNotPoll(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	src := "name: kv\nstages:\n  - id: s\n    steps:\n      - id: w\n        type: Park\n        with: {key: agent1.shop-dev}\n"
	r := e.startRun(src, nil)
	deadline := time.Now().Add(20 * time.Second)
	for e.ctl.metrics.Parked() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("step never parked")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := e.ctl.b.Apps.Put(context.Background(), "agent1.shop-dev", []byte(`{"health":"Healthy"}`)); err != nil {
		t.Fatal(err)
	}
	r = e.wait(r.ID, 20*time.Second)
	st := step(r, "s", "w")
	// Its poll fallback is an hour: only the KV change can have woken it.
	if r.Status != pipelines.StSucceeded || st.Outputs["woke"] != "key agent1.shop-dev changed" {
		t.Fatalf("%s %#v", r.Status, st.Outputs)
	}
}

func TestControllerAndNATSRestartResume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := newEnv(t, envOpts{workers: 1, dir: dir})
	src := `
name: resume
stages:
  - id: a
    steps:
      - {id: one, type: Noop, with: {outputs: {v: 1}}}
      - {id: wait, type: Wait, with: {duration: 2s}}
      - {id: two, type: Noop, with: {outputs: {v: "${{ steps.one.outputs.v + 1 }}"}}}
  - id: b
    steps:
      - {id: three, type: Noop}
`
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, e.startRun(src, nil).ID)
	}
	// Wait until every run is parked in the Wait step, then stop everything (controller,
	// worker and the embedded NATS) and start again on the same data dir.
	deadline := time.Now().Add(30 * time.Second)
	for e.ctl.metrics.Parked() < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("runs did not reach the wait step: %d parked", e.ctl.metrics.Parked())
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.stop()
	e.start(envOpts{workers: 1, dir: dir})
	for _, id := range ids {
		r := e.wait(id, 30*time.Second)
		if r.Status != pipelines.StSucceeded {
			t.Fatalf("run %s after restart: %s %s", id, r.Status, r.Error)
		}
		if v := toInt(step(r, "a", "two").Outputs["v"]); v != 2 {
			t.Errorf("run %s: output lost across restart: %v", id, v)
		}
	}
}

func TestBadInputNothingDispatched(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 0})
	ctx := context.Background()
	cases := map[string]struct {
		src    string
		inputs map[string]any
		want   string
	}{
		"yaml":         {"name: x\nstages: [", nil, "test.yaml:"},
		"unknown type": {"name: x\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Nope}\n", nil, `test.yaml:5:`},
		"bad expr":     {"name: x\nstages:\n  - id: s\n    steps:\n      - id: a\n        type: Noop\n        with: {outputs: {v: \"${{ 1 + }}\"}}\n", nil, "test.yaml:7"},
		"bad ref":      {"name: x\nstages:\n  - id: s\n    steps:\n      - id: a\n        type: Noop\n        with: {outputs: {v: \"${{ steps.nope.outputs.x }}\"}}\n", nil, `no step "nope"`},
		"input":        {"name: x\ninputs: {n: {type: number}}\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n", map[string]any{"n": "abc"}, `input "n": want a number`},
	}
	for name, c := range cases {
		_, err := e.ctl.Start(ctx, StartRequest{File: "test.yaml", Source: []byte(c.src), Inputs: c.inputs})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrInvalid containing %q", name, err, c.want)
		}
	}
	// Nothing was stored or sent.
	if _, err := e.ctl.b.Runs.ListKeys(ctx); err == nil {
		l, _ := e.ctl.b.Runs.Keys(ctx)
		if len(l) > 0 {
			t.Errorf("runs stored for invalid requests: %v", l)
		}
	}
	si, err := e.conn.JS.Stream(ctx, queue.StreamJobs)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := si.Info(ctx)
	if info.State.Msgs != 0 {
		t.Errorf("%d jobs dispatched for invalid requests", info.State.Msgs)
	}
}

func TestBadJobPayloadFailsStepNotWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	ctx := context.Background()
	r := e.startRun("name: p\nstages:\n  - id: s\n    steps:\n      - {id: gate, type: Park}\n", nil)
	for e.ctl.metrics.Parked() < 1 {
		time.Sleep(20 * time.Millisecond)
	}
	// A job with an unknown step type for this run, and an undecodable one.
	bad, _ := json.Marshal(envelope.Job{V: envelope.Version, Run: r.ID, Stage: "s", Step: "gate", Type: "NoSuchStep", Attempt: 1, Wake: 0})
	_, _ = e.conn.JS.Publish(ctx, queue.JobSubject("default"), []byte("\x00garbage"))
	_, _ = e.conn.JS.Publish(ctx, queue.JobSubject("default"), bad)
	// The worker survives: a new run still completes.
	ok := e.startRun("name: q\nstages:\n  - id: s\n    steps:\n      - {id: a, type: Noop}\n", nil)
	if got := e.wait(ok.ID, 20*time.Second); got.Status != pipelines.StSucceeded {
		t.Fatalf("worker broken by bad payload: %s", got.Status)
	}
	// The bad messages may be handled after the good run ended (the pull that takes them can
	// be served after the one that took the good job): wait for the log line, bounded.
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(e.logBuf.String(), "bad job payload"); {
		if time.Now().After(deadline) {
			t.Fatal("bad payload not logged")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A step that runs three times its AckWait is kept alive by the worker's heartbeats: it is
// delivered once and its result counts.
func TestHeartbeatsKeepLongStepsFromRedelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 2, tuning: queue.ConsumerTuning{AckWait: time.Second, MaxDeliver: 5}})
	r := e.startRun("name: slow\nstages:\n  - id: s\n    steps:\n      - {id: z, type: Slow, with: {sleep: 3s}}\n", nil)
	r = e.wait(r.ID, 30*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run ended %s: %s", r.Status, r.Error)
	}
	time.Sleep(1500 * time.Millisecond) // a redelivery would start within an AckWait
	n, _ := slowStarts.Load(r.ID + "/z")
	if starts := n.(*atomic.Int64).Load(); starts != 1 {
		t.Fatalf("the step started %d times: heartbeats did not hold the job", starts)
	}
}

func TestWorkerErrorsAndExhaustedDeliveries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1, tuning: queue.ConsumerTuning{AckWait: 2 * time.Second, MaxDeliver: 2}})
	r := e.startRun("name: f\nstages:\n  - id: s\n    steps:\n      - {id: f, type: Flaky, with: {failures: 10}}\n", nil)
	r = e.wait(r.ID, 30*time.Second)
	if r.Status != pipelines.StFailed || !strings.Contains(r.Error, "gave up after 2 attempts: transient failure 2 of 10") {
		t.Fatalf("exhausted job: %s %q", r.Status, r.Error)
	}
}

func TestSecretsNeverStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	ctx := context.Background()
	ok := e.startRun("name: leak\nstages:\n  - id: s\n    steps:\n      - {id: l, type: Leaky}\n", nil)
	bad := e.startRun("name: leak2\nstages:\n  - id: s\n    steps:\n      - {id: l, type: Leaky, with: {fail: true}}\n", nil)
	e.wait(ok.ID, 20*time.Second)
	rb := e.wait(bad.ID, 20*time.Second)
	if !strings.Contains(rb.Error, "auth failed with token *** and password ***") {
		t.Errorf("masked error not kept: %q", rb.Error)
	}
	var seen []string
	for _, b := range []jetstream.KeyValue{e.ctl.b.Runs, e.ctl.b.Specs, e.ctl.b.Workers} {
		keys, _ := b.Keys(ctx)
		for _, k := range keys {
			v, err := b.Get(ctx, k)
			if err == nil {
				seen = append(seen, string(v.Value()))
			}
		}
	}
	for _, stream := range []string{queue.StreamLogs, queue.StreamEvents, queue.StreamJobs} {
		s, _ := e.conn.JS.Stream(ctx, stream)
		info, _ := s.Info(ctx)
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
			if m, err := s.GetMsg(ctx, seq); err == nil {
				seen = append(seen, string(m.Data))
			}
		}
	}
	seen = append(seen, e.logBuf.String())
	logged := false
	escaped, _ := json.Marshal(testSecretJSON)
	for _, s := range seen {
		for _, secret := range []string{testSecret, testSecretJSON, string(escaped[1 : len(escaped)-1])} {
			if strings.Contains(s, secret) {
				t.Fatalf("secret %q leaked into stored data: %.400s", secret, s)
			}
		}
		logged = logged || strings.Contains(s, "using token ***")
	}
	if !logged {
		t.Error("the step's log line was not stored (masked)")
	}
}
