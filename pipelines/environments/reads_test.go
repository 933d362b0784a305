package environments_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/examples"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/pipelines/environments"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/bitbucket"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
)

// These tests run prflow (embedded NATS, controller, worker) against the fake forges: a
// hand commit's push webhook makes the controller dispatch a ReadReleaseValues job, the worker
// reads the files through the connector, and the environment shows what they hold.

// handCommit commits files (nil content: delete) to branch of acme/release as a person
// would, outside prflow, and waits for its webhook.
func handCommit(t *testing.T, f *scmtest.Forge, p scm.Provider, branch string, files map[string]string) string {
	t.Helper()
	sha := commitOnly(t, p, branch, files)
	if err := f.WaitWebhooks(context.Background()); err != nil {
		t.Fatal(err)
	}
	return sha
}

// commitOnly is handCommit without waiting for the webhook.
func commitOnly(t *testing.T, p scm.Provider, branch string, files map[string]string) string {
	t.Helper()
	ctx := context.Background()
	head, err := p.Branch(ctx, "acme/release", branch)
	if err != nil {
		t.Fatal(err)
	}
	var changes []scm.FileChange
	for path, content := range files {
		if content == "" {
			changes = append(changes, scm.FileChange{Path: path, Delete: true})
		} else {
			changes = append(changes, scm.FileChange{Path: path, Content: []byte(content)})
		}
	}
	sha, err := p.Commit(ctx, "acme/release", scm.CommitInput{Branch: branch, Parent: head.SHA, Message: "hand edit", Changes: changes})
	if err != nil {
		t.Fatal(err)
	}
	return sha
}

// readRecords are the reads stored in prflow-envs, as raw JSON.
func readRecords(t *testing.T, js *queue.Conn) []map[string]any {
	t.Helper()
	ctx := context.Background()
	kv, err := queue.OpenEnvHistory(ctx, js.JS)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for k := range keys.Keys() {
		if !strings.HasPrefix(k, queue.EnvReadPrefix) {
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		if strings.Contains(string(e.Value()), scmtest.DefaultToken) {
			t.Errorf("read record %s carries the connector's token", k)
		}
		var m map[string]any
		_ = json.Unmarshal(e.Value(), &m)
		out = append(out, m)
	}
	return out
}

// TestHandCommitValuesAreRead: after a hand commit the environment shows the value the file
// now holds (read by a worker through the connector), with the author and the commit; the
// merge prflow made before was read too and agrees with its run. Neither the job nor the
// stored read carries the token.
func TestHandCommitValuesAreRead(t *testing.T) {
	e := newEnvEnv(t)
	e.agentUp("sim")
	r := e.run(promote("web", "dev"), "2.0.0", pipelines.StSucceeded)
	merged := mergeCommit(r, "dev")
	dev := e.waitEnv("dev", "its merge read", func(env *environments.Environment) bool {
		return env.Desired.Commit == merged && env.Desired.Read != nil && env.Desired.Read.State == "read"
	})
	if rd := dev.Desired.Read; len(rd.Disagree) > 0 || valueOf(dev, "image.tag") != "2.0.0" {
		t.Fatalf("prflow's merge: read %+v, values %+v; want 2.0.0 agreeing with the run", rd, dev.Desired.Values)
	}
	sha := handCommit(t, e.gh.Forge, e.ghp, dev.Desired.Branch, map[string]string{"envs/dev/config.json": `{"image": {"tag": "1.7.0"}, "replicas": 2}`})
	dev = e.waitEnv("dev", "showing the hand commit's value", func(env *environments.Environment) bool {
		return env.Desired.Commit == sha && valueOf(env, "image.tag") == "1.7.0"
	})
	d := dev.Desired
	if d.Outside == nil || d.Outside.Commit != sha || d.Outside.Author == "" || d.ValuesUnknown || d.Read == nil || d.Read.State != "read" || d.Read.Commit != sha {
		t.Errorf("after the hand commit: %+v (outside %+v, read %+v)", d, d.Outside, d.Read)
	}
	for _, rec := range readRecords(t, e.Conn) {
		if rec["state"] != "read" {
			t.Errorf("read %v: state %v, error %v", rec["id"], rec["state"], rec["error"])
		}
	}
}

// TestHandCommitDeletingTheFile: the environment says its file is gone at the hand commit,
// and shows no value for it (neither the old one nor a success).
func TestHandCommitDeletingTheFile(t *testing.T) {
	e := newEnvEnv(t)
	e.agentUp("sim")
	r := e.run(promote("web", "dev"), "2.0.0", pipelines.StSucceeded)
	dev := e.waitEnv("dev", "desired by the run", func(env *environments.Environment) bool { return env.Desired.Commit == mergeCommit(r, "dev") })
	sha := handCommit(t, e.gh.Forge, e.ghp, dev.Desired.Branch, map[string]string{"envs/dev/config.json": ""})
	dev = e.waitEnv("dev", "saying its file is gone", func(env *environments.Environment) bool {
		return env.Desired.Read != nil && env.Desired.Read.Commit == sha && env.Desired.Read.State == "read"
	})
	if rd := dev.Desired.Read; !slices.Contains(rd.Missing, "envs/dev/config.json") || len(dev.Desired.Values) != 0 || dev.Desired.Outside == nil {
		t.Errorf("after deleting the file: read %+v, values %+v, outside %+v", rd, dev.Desired.Values, dev.Desired.Outside)
	}
}

// TestReadRetriesForgeErrors: the forge answers the file read with 502 twice: the worker
// retries with backoff and the value is shown once the forge recovers. Then a 403 (the
// token lost access): the read fails, the environment says so with the status, and shows
// neither the old value nor a success.
func TestReadRetriesForgeErrors(t *testing.T) {
	e := newEnvEnv(t)
	e.agentUp("sim")
	r := e.run(promote("web", "dev"), "2.0.0", pipelines.StSucceeded)
	dev := e.waitEnv("dev", "its merge read", func(env *environments.Environment) bool {
		return env.Desired.Commit == mergeCommit(r, "dev") && env.Desired.Read != nil && env.Desired.Read.State == "read"
	})
	branch := dev.Desired.Branch
	e.gh.ResetCalls()
	if err := e.gh.InjectFault(scmtest.Fault{Method: "GET", PathPattern: "envs/dev/config.json", Status: 502, Times: 2}); err != nil {
		t.Fatal(err)
	}
	sha := handCommit(t, e.gh.Forge, e.ghp, branch, map[string]string{"envs/dev/config.json": `{"image": {"tag": "1.8.0"}}`})
	e.waitEnv("dev", "read after the forge recovered", func(env *environments.Environment) bool {
		return env.Desired.Commit == sha && valueOf(env, "image.tag") == "1.8.0" && env.Desired.Read.State == "read"
	})
	faulted := 0
	for _, c := range e.gh.Calls() {
		if c.Faulted {
			faulted++
		}
	}
	if faulted != 2 {
		t.Errorf("%d reads answered 502, want 2 (the worker retried them)", faulted)
	}

	if err := e.gh.InjectFault(scmtest.Fault{Method: "GET", PathPattern: "envs/dev/config.json", Status: 403, Body: `{"message":"Resource not accessible by integration"}`}); err != nil {
		t.Fatal(err)
	}
	sha2 := handCommit(t, e.gh.Forge, e.ghp, branch, map[string]string{"envs/dev/config.json": `{"image": {"tag": "1.9.0"}}`})
	dev = e.waitEnv("dev", "saying the read failed", func(env *environments.Environment) bool {
		return env.Desired.Commit == sha2 && env.Desired.Read != nil && env.Desired.Read.State == "failed"
	})
	if rd := dev.Desired.Read; !strings.Contains(rd.Error, "403") || !strings.Contains(rd.Error, "envs/dev/config.json") || !rd.Retry.IsZero() {
		t.Errorf("failed read %+v: want the 403 and the file, and no retry", rd)
	}
	if !dev.Desired.ValuesUnknown || len(dev.Desired.Values) != 0 {
		t.Errorf("a failed read shows values %+v (unknown %v): want none", dev.Desired.Values, dev.Desired.ValuesUnknown)
	}
}

// TestPushBurstBoundsReads: 50 hand commits in a row make a few reads, not 50, and the
// environment ends on the last one's value.
func TestPushBurstBoundsReads(t *testing.T) {
	// Paced for a loaded machine, where 50 pushes may take a minute: a gap of 5 s between two
	// pushes ends a burst, and a burst is read every 30 s at least. Set before the model starts.
	quiet, most := *environments.ReadQuiet, *environments.ReadMaxDelay
	*environments.ReadQuiet, *environments.ReadMaxDelay = 5*time.Second, 30*time.Second
	t.Cleanup(func() { *environments.ReadQuiet, *environments.ReadMaxDelay = quiet, most })
	e := newEnvEnv(t)
	e.agentUp("sim")
	r := e.run(promote("web", "dev"), "2.0.0", pipelines.StSucceeded)
	dev := e.waitEnv("dev", "its merge read", func(env *environments.Environment) bool {
		return env.Desired.Commit == mergeCommit(r, "dev") && env.Desired.Read != nil && env.Desired.Read.State == "read"
	})
	before := len(readRecords(t, e.Conn))
	var last string
	start := time.Now()
	for i := range 50 {
		last = commitOnly(t, e.ghp, dev.Desired.Branch, map[string]string{"envs/dev/config.json": `{"image": {"tag": "3.0.` + string(rune('0'+i/10)) + string(rune('0'+i%10)) + `"}}`})
	}
	if err := e.gh.WaitWebhooks(context.Background()); err != nil {
		t.Fatal(err)
	}
	burst := time.Since(start)
	e.waitEnv("dev", "at the burst's last value", func(env *environments.Environment) bool {
		return env.Desired.Commit == last && valueOf(env, "image.tag") == "3.0.49"
	})
	n := len(readRecords(t, e.Conn)) - before
	// A read goes out once the branch is quiet, or after ReadMaxDelay of a burst that goes on:
	// one per ReadMaxDelay of the burst, one at its end, and one of slack.
	limit := min(int(burst / *environments.ReadMaxDelay)+5, 25)
	t.Logf("50 pushes in %s made %d reads (at most %d)", burst.Round(time.Millisecond), n, limit)
	if n < 1 || n > limit {
		t.Errorf("50 pushes in %s made %d reads, want at most %d (debounced per branch)", burst.Round(time.Millisecond), n, limit)
	}
}

// TestBitbucketHandCommitDetected: Bitbucket's push webhook lists no files; the read job
// compares the push through the forge and the hand commit is shown like GitHub's, with its value.
func TestBitbucketHandCommitDetected(t *testing.T) {
	bb := scmtest.NewBitbucket(t)
	if _, err := bb.CreateRepo("acme", "release", examples.ReleaseRepo()); err != nil {
		t.Fatal(err)
	}
	bbp, err := bitbucket.New(bitbucket.WithBaseURL(bb.APIURL()), bitbucket.WithToken(scmtest.DefaultToken))
	if err != nil {
		t.Fatal(err)
	}
	env := ctltest.New(t, ctltest.Options{Services: map[string]any{steps.ServiceSCM: connector.Static{"release": bbp}}, Secrets: []string{scmtest.DefaultToken}})
	env.Ctl.SetWebhooks(controller.NewWebhooks(0, map[string]string{"bitbucket": hookSecret}))
	srv := httptest.NewServer(env.Ctl.Handler(&controller.Auth{}))
	t.Cleanup(srv.Close)
	bb.RegisterWebhook(srv.URL+"/hooks/bitbucket", hookSecret)
	e := &envEnv{Env: env, model: env.Ctl.Environments()}
	e.agentUp("sim")
	r := e.run(promote("web", "dev"), "2.0.0", pipelines.StSucceeded)
	dev := e.waitEnv("dev", "desired by the run", func(x *environments.Environment) bool { return x.Desired.Commit == mergeCommit(r, "dev") })

	// A commit to another environment's file is compared too, and changes nothing for dev.
	handCommit(t, bb.Forge, bbp, dev.Desired.Branch, map[string]string{"envs/prod/config.json": `{"image": {"tag": "9.9.9"}}`})
	sha := handCommit(t, bb.Forge, bbp, dev.Desired.Branch, map[string]string{"envs/dev/config.json": `{"image": {"tag": "1.7.0"}}`})
	dev = e.waitEnv("dev", "changed outside prflow", func(x *environments.Environment) bool {
		return x.Desired.Outside != nil && x.Desired.Commit == sha && valueOf(x, "image.tag") == "1.7.0"
	})
	if o := dev.Desired.Outside; !slices.Contains(o.Files, "envs/dev/config.json") || slices.Contains(o.Files, "envs/prod/config.json") {
		t.Errorf("outside change %+v: want envs/dev/config.json only", o)
	}
	compared := 0
	for _, rec := range readRecords(t, e.Conn) {
		if rec["before"] != nil && rec["before"] != "" {
			compared++
		}
	}
	if compared == 0 {
		t.Error("no comparison read was made for the Bitbucket pushes")
	}
}
