package simagent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/syncwindow"
	"github.com/prflow/prflow/queue"
)

const appSetYAML = `# the release repo's ApplicationSet: one app per environment config
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata:
  name: web
spec:
  generators:
    - git:
        repoURL: https://git.example/release.git
        revision: main
        files:
          - path: "envs/*/config.yaml"
  template:
    metadata:
      name: 'web-{{env}}'
      labels:
        harness.io/serviceRef: web
        harness.io/envRef: '{{env}}'
    spec:
      project: shop
      source: {repoURL: https://git.example/release.git, path: 'envs/{{path.basename}}', targetRevision: main}
      destination: {name: '{{cluster.name}}', namespace: 'web-{{env}}'}
`

// repo is a release repo worked on with the git CLI, as a person or prflow's local driver would.
type repo struct {
	t   *testing.T
	dir string
}

func newRepo(t *testing.T) *repo {
	t.Helper()
	r := &repo{t: t, dir: t.TempDir()}
	r.git("init", "-q", "-b", "main")
	r.write("appset.yaml", appSetYAML)
	r.write("envs/dev/config.yaml", "env: dev\ncluster:\n  name: dev-eu\nimage: web:1.0\n")
	r.write("README.md", "release repo\n")
	r.git("add", "-A")
	r.git("commit", "-q", "-m", "initial")
	return r
}

func (r *repo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func (r *repo) write(path, content string) {
	r.t.Helper()
	p := filepath.Join(r.dir, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// merge commits files on a branch and merges it into main with a merge commit, as MergePR does.
func (r *repo) merge(branch string, files map[string]string) string {
	r.t.Helper()
	r.git("checkout", "-q", "-b", branch)
	for p, c := range files {
		if c == "" {
			r.git("rm", "-q", p)
			continue
		}
		r.write(p, c)
	}
	r.git("add", "-A")
	r.git("commit", "-q", "-m", "change on "+branch)
	r.git("checkout", "-q", "main")
	r.git("merge", "-q", "--no-ff", "-m", "Merge "+branch, branch)
	return r.git("rev-parse", "HEAD")
}

type simWorld struct {
	t      *testing.T
	repo   *repo
	conn   *queue.Conn
	client *agent.Client
	agent  *Agent
}

func startSim(t *testing.T, manual bool, tune ...func(*Options)) *simWorld {
	t.Helper()
	w := &simWorld{t: t, repo: newRepo(t)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := queue.Open(ctx, queue.Options{DataDir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := queue.Setup(ctx, conn.JS, 1); err != nil {
		t.Fatal(err)
	}
	w.conn = conn
	b, _ := queue.OpenBuckets(ctx, conn.JS)
	w.client = agent.NewClient(conn.NC, b.Apps, b.Agents)
	// A Diff renders Jsonnet at two revisions: seconds of CPU under -race, past the client's
	// default 30s when the machine is loaded (seen at load 28). No test here times a request.
	w.client.Timeout = 2 * time.Minute
	o := Options{Repo: w.repo.dir, Delay: 30 * time.Millisecond, Step: 20 * time.Millisecond, Poll: 40 * time.Millisecond,
		ManualSync: manual, Log: log}
	for _, f := range tune {
		f(&o)
	}
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	w.agent = a
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx, conn) }()
	t.Cleanup(func() { cancel(); <-done; conn.Close() })
	return w
}

func (w *simWorld) waitRecord(app, what string, cond func(*agent.AppStatus) bool) *agent.AppStatus {
	w.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := w.client.Status(context.Background(), "sim", app)
		if err != nil && !errors.Is(err, agent.ErrNotFound) {
			w.t.Fatal(err)
		}
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(st, "", " ")
			w.t.Fatalf("%s: timed out waiting for %s; record:\n%s", app, what, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAutoSyncDeploysAndMergedDegradedEndsDegraded(t *testing.T) {
	w := startSim(t, false)
	head := w.repo.git("rev-parse", "HEAD")
	st := w.waitRecord("web-dev", "deployed at HEAD, Healthy", func(s *agent.AppStatus) bool {
		return s != nil && s.Sync == agent.SyncSynced && s.Health == agent.HealthHealthy && s.SyncedRevision == head
	})
	if st.ApplicationSet != "web" || st.Cluster != "dev-eu" || st.Namespace != "web-dev" || st.Project != "shop" ||
		st.Labels["harness.io/envRef"] != "dev" || st.Source.Path != "envs/dev" || !st.Operation.Automated || st.Agent != "sim" {
		b, _ := json.MarshalIndent(st, "", " ")
		t.Fatalf("record does not describe the generated app:\n%s", b)
	}
	// A merge sets simulate: degraded in dev's config: the agent deploys it by itself.
	merged := w.repo.merge("degrade", map[string]string{"envs/dev/config.yaml": "env: dev\ncluster:\n  name: dev-eu\nimage: web:1.1\nsimulate: degraded\n"})
	st = w.waitRecord("web-dev", "Degraded at the merge commit", func(s *agent.AppStatus) bool {
		return s.Health == agent.HealthDegraded && s.SyncedRevision == merged && s.Sync == agent.SyncSynced
	})
	if !strings.Contains(st.HealthMessage, "envs/dev/config.yaml says simulate: Degraded") {
		t.Fatalf("health message: %q", st.HealthMessage)
	}
}

func TestSyncRequestDeploysTaggedWithRun(t *testing.T) {
	w := startSim(t, true)
	w.waitRecord("web-dev", "OutOfSync, nothing deployed", func(s *agent.AppStatus) bool {
		return s != nil && s.Sync == agent.SyncOutOfSync && s.Health == agent.HealthMissing
	})
	merged := w.repo.merge("json-config", map[string]string{"envs/dev/config.yaml": "env: dev\ncluster:\n  name: dev-eu\n",
		"envs/qa/config.yaml": `{"env": "qa", "cluster": {"name": "qa-eu"}, "simulate": "degraded"}`})
	w.waitRecord("web-qa", "the new environment's app", func(s *agent.AppStatus) bool { return s != nil && s.Revision == merged })
	ctx := context.Background()
	req := agent.SyncRequest{Apps: []string{"web-dev", "web-qa", "web-nope"}, RunID: "run-1", Step: "dev/sync/1"}
	rep, err := w.client.Sync(ctx, "sim", req)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Results[0].Error != nil || rep.Results[0].Revision != merged || !errors.Is(rep.Results[2].Error, agent.ErrNotFound) {
		t.Fatalf("sync results: %+v", rep.Results)
	}
	again, err := w.client.Sync(ctx, "sim", agent.SyncRequest{Apps: []string{"web-dev"}, RunID: "run-1", Step: "dev/sync/1"})
	if err != nil || !(again.Results[0].AlreadyRunning || again.Results[0].Error == nil) {
		t.Fatalf("repeat: %+v %v", again, err)
	}
	other, err := w.client.Sync(ctx, "sim", agent.SyncRequest{Apps: []string{"web-qa"}, RunID: "run-2", Step: "x"})
	if err != nil {
		t.Fatal(err)
	}
	dev := w.waitRecord("web-dev", "Healthy by our operation", func(s *agent.AppStatus) bool {
		return s.Health == agent.HealthHealthy && s.Operation != nil && s.Operation.Phase == agent.PhaseSucceeded
	})
	if !dev.Operation.Tagged("run-1", "dev/sync/1") || dev.SyncedRevision != merged {
		t.Fatalf("dev operation: %+v", dev.Operation)
	}
	if e := other.Results[0].Error; e != nil && !errors.Is(e, agent.ErrOperationInProgress) {
		t.Fatalf("sync of a busy app: %v", e)
	}
	w.waitRecord("web-qa", "Degraded from its JSON config", func(s *agent.AppStatus) bool { return s.Health == agent.HealthDegraded })

	apps, err := w.client.Apps(ctx, "sim", agent.AppsQuery{Selector: "harness.io/envRef in (qa)", ApplicationSet: "web"})
	if err != nil || len(apps) != 1 || apps[0].Name != "web-qa" {
		t.Fatalf("apps: %v %v", apps, err)
	}
	qaUID := apps[0].UID
	if qaUID == "" || apps[0].CreatedAt.IsZero() {
		t.Fatalf("app without uid or creation time: %+v", apps[0])
	}
	// The environment is removed: its app goes, and its record becomes a tombstone that says so.
	w.repo.merge("drop-qa", map[string]string{"envs/qa/config.yaml": ""})
	w.waitRecord("web-qa", "record deleted", func(s *agent.AppStatus) bool { return s == nil })
	if _, err := w.client.Status(ctx, "sim", "web-qa"); !errors.Is(err, agent.ErrDeleted) || !strings.Contains(err.Error(), "app web-qa was deleted at") {
		t.Fatalf("Status of the removed app: %v, want ErrDeleted", err)
	}
	// Added again: a new app (new uid) replaces the tombstone.
	w.repo.merge("readd-qa", map[string]string{"envs/qa/config.yaml": `{"env": "qa", "cluster": {"name": "qa-eu"}}`})
	back := w.waitRecord("web-qa", "the app added again", func(s *agent.AppStatus) bool { return s != nil })
	if back.UID == "" || back.UID == qaUID {
		t.Fatalf("the app added again has uid %q (was %q)", back.UID, qaUID)
	}
}

func TestNewReportsBadRepos(t *testing.T) {
	empty := t.TempDir()
	r := newRepo(t)
	r.git("rm", "-q", "appset.yaml")
	r.git("commit", "-q", "-m", "no appset")
	cases := map[string]struct {
		o    Options
		want string
	}{
		"no repo":      {Options{}, "release repo is required"},
		"not a repo":   {Options{Repo: empty}, empty},
		"no appset":    {Options{Repo: r.dir}, "no ApplicationSet manifest"},
		"named appset": {Options{Repo: r.dir, AppSetPath: "deploy/appset.yaml"}, "deploy/appset.yaml: not in the release repo"},
		"bad branch":   {Options{Repo: r.dir, Branch: "nope"}, "branch nope"},
	}
	for name, c := range cases {
		_, err := New(c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
}

func TestTemplatesRender(t *testing.T) {
	cfg := map[string]any{"env": "prod", "cluster": map[string]any{"name": "prod-us"}, "replicas": float64(3)}
	as, err := parseAppSet([]byte(appSetYAML))
	if err != nil {
		t.Fatal(err)
	}
	tm, err := as.render("envs/prod/config.yaml", cfg)
	if err != nil || tm.Metadata.Name != "web-prod" || tm.Spec.Destination.Name != "prod-us" || tm.Spec.Source.Path != "envs/prod" {
		t.Fatalf("fasttemplate render: %+v %v", tm, err)
	}
	goTmpl := strings.NewReplacer("spec:\n  generators", "spec:\n  goTemplate: true\n  generators",
		"{{env}}", "{{ .env }}", "{{cluster.name}}", "{{ .cluster.name }}", "{{path.basename}}", "{{ .path.basename }}").Replace(appSetYAML)
	as, err = parseAppSet([]byte(goTmpl))
	if err != nil {
		t.Fatal(err)
	}
	if tm, err := as.render("envs/prod/config.yaml", cfg); err != nil || tm.Metadata.Name != "web-prod" || tm.Spec.Destination.Name != "prod-us" ||
		tm.Spec.Source.Path != "envs/prod" || tm.Metadata.Labels["harness.io/envRef"] != "prod" {
		t.Fatalf("go template render: %+v %v", tm, err)
	}
	as, _ = parseAppSet([]byte(strings.Replace(goTmpl, "namespace: 'web-{{ .env }}'", "namespace: '{{ .nope }}'", 1)))
	if _, err := as.render("envs/prod/config.yaml", cfg); err == nil || !strings.Contains(err.Error(), "destination: namespace") || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("a missing parameter must be an error naming the field: %v", err)
	}
}

func TestRemoteRepoByURL(t *testing.T) {
	// The release repo given as a git URL: the agent keeps its own clone and fetches it.
	src := newRepo(t)
	bare := filepath.Join(t.TempDir(), "release.git")
	src.git("clone", "-q", "--bare", src.dir, bare)
	src.git("remote", "add", "origin", bare)
	w := startSim(t, false, func(o *Options) {
		o.Repo, o.Delay, o.Step = "file://"+bare, 20*time.Millisecond, 10*time.Millisecond
	})
	w.repo = src
	w.waitRecord("web-dev", "deployed from the clone", func(s *agent.AppStatus) bool { return s != nil && s.Health == agent.HealthHealthy })
	merged := src.merge("prod", map[string]string{"envs/prod/config.yaml": "env: prod\ncluster:\n  name: prod-eu\n"})
	src.git("push", "-q", "origin", "main")
	w.waitRecord("web-prod", "the pushed environment deployed", func(s *agent.AppStatus) bool {
		return s != nil && s.Health == agent.HealthHealthy && s.SyncedRevision == merged
	})
}

// A sync that applies what is already live changes nothing on the cluster, so health stays
// Healthy throughout (on Argo CD a no-op sync does not roll anything out); a real change still
// rolls out. The dev sandbox's gate soak failed when the simulation went Progressing again
// after GitOpsSync's re-sync of the commit that auto-sync had just deployed.
func TestResyncOfTheLiveConfigKeepsHealth(t *testing.T) {
	w := startSim(t, false)
	head := w.repo.git("rev-parse", "HEAD")
	w.waitRecord("web-dev", "deployed at HEAD, Healthy", func(s *agent.AppStatus) bool {
		return s != nil && s.Sync == agent.SyncSynced && s.Health == agent.HealthHealthy && s.SyncedRevision == head
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := queue.OpenBuckets(ctx, w.conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	// Every write of the record, not samples of it: the Progressing window is one Step long.
	watch, err := b.Apps.Watch(ctx, agent.StatusKey("sim", "web-dev"), jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	healths := func(until func(*agent.AppStatus) bool) []string {
		var seen []string
		timeout := time.After(15 * time.Second)
		for {
			select {
			case e := <-watch.Updates():
				var st agent.AppStatus
				if e == nil || json.Unmarshal(e.Value(), &st) != nil {
					continue
				}
				seen = append(seen, st.Health)
				if until(&st) {
					return seen
				}
			case <-timeout:
				t.Fatalf("timed out; healths seen %v", seen)
			}
		}
	}
	rep, err := w.client.Sync(ctx, "sim", agent.SyncRequest{Apps: []string{"web-dev"}, RunID: "run-1", Step: "s"})
	if err != nil || rep.Results[0].Error != nil {
		t.Fatalf("sync: %+v %v", rep, err)
	}
	seen := healths(func(s *agent.AppStatus) bool {
		return s.Operation != nil && s.Operation.Tagged("run-1", "s") && s.Operation.Phase == agent.PhaseSucceeded && s.SyncedRevision == head
	})
	// The simulation's later steps (sync status, health) follow the Succeeded phase.
	for drain := time.After(500 * time.Millisecond); ; {
		select {
		case e := <-watch.Updates():
			var st agent.AppStatus
			if e != nil && json.Unmarshal(e.Value(), &st) == nil {
				seen = append(seen, st.Health)
			}
			continue
		case <-drain:
		}
		break
	}
	for _, h := range seen {
		if h != agent.HealthHealthy {
			t.Fatalf("health went %s during a sync that changed nothing (seen %v)", h, seen)
		}
	}
	if st := w.waitRecord("web-dev", "settled", func(*agent.AppStatus) bool { return true }); st.Health != agent.HealthHealthy {
		t.Fatalf("health after a sync that changed nothing: %s", st.Health)
	}
	merged := w.repo.merge("bump", map[string]string{"envs/dev/config.yaml": "env: dev\ncluster:\n  name: dev-eu\nimage: web:2.0\n"})
	seen = healths(func(s *agent.AppStatus) bool { return s.SyncedRevision == merged && s.Health == agent.HealthHealthy })
	if !slices.Contains(seen, agent.HealthProgressing) {
		t.Fatalf("a real change did not roll out (Progressing first): healths seen %v", seen)
	}
}

func TestSyncWindowsBlockDeploysAndSyncRequests(t *testing.T) {
	var now atomic.Int64
	thu2300 := time.Date(2026, 11, 26, 23, 0, 0, 0, time.UTC)
	now.Store(thu2300.UnixNano())
	w := startSim(t, false, func(o *Options) {
		o.Now = func() time.Time { return time.Unix(0, now.Load()).UTC() }
		o.SyncWindows = []syncwindow.Window{{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h", ManualSync: true}}
	})
	fri0600 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	st := w.waitRecord("web-dev", "blocked, not deployed", func(s *agent.AppStatus) bool {
		return s != nil && s.SyncWindows != nil && s.SyncWindows.Blocked && s.SyncWindows.ManualSync && s.SyncWindows.Until.Equal(fri0600)
	})
	time.Sleep(200 * time.Millisecond) // several polls: auto-sync must wait for the window
	if st = w.waitRecord("web-dev", "record", func(s *agent.AppStatus) bool { return s != nil }); st.Operation != nil || st.Sync != agent.SyncOutOfSync {
		t.Fatalf("deployed inside a deny window: %+v", st.Operation)
	}
	ctx := context.Background()
	rep, err := w.client.Sync(ctx, "sim", agent.SyncRequest{Apps: []string{"web-dev"}, RunID: "run-1", Step: "dev/sync/1"})
	if err != nil {
		t.Fatal(err)
	}
	if e := rep.Results[0].Error; e == nil || !errors.Is(e, agent.ErrSyncWindow) || e.Message != "blocked by sync window until 2026-11-27T06:00:00Z" {
		t.Fatalf("sync inside the window: %+v", rep.Results[0])
	}
	// The window ends: the record says so and auto-sync deploys.
	now.Store(fri0600.Add(time.Minute).UnixNano())
	w.waitRecord("web-dev", "open and deployed", func(s *agent.AppStatus) bool {
		return s.SyncWindows != nil && !s.SyncWindows.Blocked && s.Sync == agent.SyncSynced && s.Health == agent.HealthHealthy
	})
}

func TestNewRefusesABadSyncWindow(t *testing.T) {
	r := newRepo(t)
	_, err := New(Options{Repo: r.dir, SyncWindows: []syncwindow.Window{{Kind: "deny", Schedule: "0 22 * * *", Duration: "8 hours"}}})
	if err == nil || !strings.Contains(err.Error(), `sync window 0`) || !strings.Contains(err.Error(), `duration "8 hours"`) {
		t.Fatalf("got %v", err)
	}
}

// Issue 32 #14: a merged config file that does not parse is the change's fault, not the agent
// losing Argo CD. The app shows what Argo CD would — sync Unknown with a ComparisonError — the
// agent's view stays fresh (so a gate judges it instead of waiting out an outage), a sync of
// it fails with the error, and the other apps carry on.
func TestUnparsableConfigIsComparisonErrorNotOutage(t *testing.T) {
	w := startSim(t, true)
	w.repo.merge("qa", map[string]string{"envs/qa/config.yaml": "env: qa\ncluster:\n  name: qa-eu\n"})
	w.waitRecord("web-qa", "the qa app", func(s *agent.AppStatus) bool { return s != nil })
	bad := w.repo.merge("broken", map[string]string{"envs/dev/config.yaml": "env: dev\ncluster: [name: dev-eu\n",
		"envs/qa/config.yaml": "env: qa\ncluster:\n  name: qa-eu\nimage: web:2\n"})
	st := w.waitRecord("web-dev", "ComparisonError at the broken commit", func(s *agent.AppStatus) bool {
		return s != nil && s.Sync == agent.SyncUnknown && s.Revision == bad
	})
	if !strings.Contains(st.Message, "ComparisonError") || !strings.Contains(st.Message, "envs/dev/config.yaml") {
		t.Fatalf("message: %q", st.Message)
	}
	w.waitRecord("web-qa", "qa current at the same commit", func(s *agent.AppStatus) bool {
		return s.Revision == bad && s.Sync == agent.SyncOutOfSync && s.Message == ""
	})
	if v := w.client.View(context.Background(), "sim"); !v.Fresh {
		t.Fatalf("the agent's view must stay fresh on a broken config file: %+v", v)
	}
	rep, err := w.client.Sync(context.Background(), "sim", agent.SyncRequest{Apps: []string{"web-dev"}, RunID: "run-1", Step: "dev/sync/1"})
	if err != nil || rep.Results[0].Error != nil {
		t.Fatalf("sync: %v %+v", err, rep)
	}
	st = w.waitRecord("web-dev", "the sync failing on the broken file", func(s *agent.AppStatus) bool {
		return s.Operation != nil && s.Operation.Phase == agent.PhaseFailed
	})
	if !strings.Contains(st.Operation.Message, "ComparisonError") || !strings.Contains(st.Operation.Message, "envs/dev/config.yaml") {
		t.Fatalf("operation message: %q", st.Operation.Message)
	}
	// Fixed: the error goes.
	w.repo.merge("fix", map[string]string{"envs/dev/config.yaml": "env: dev\ncluster:\n  name: dev-eu\nimage: web:3\n"})
	w.waitRecord("web-dev", "the ComparisonError gone", func(s *agent.AppStatus) bool {
		return s.Sync == agent.SyncOutOfSync && s.Message == ""
	})
}
