package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/flux"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/local"
	"github.com/prflow/prflow/steps"
)

// The TestRealFlux… tests run prflow's Flux agent against real Flux controllers
// (source-controller and kustomize-controller, deploy/e2e/flux/build.sh and up.sh) on
// realenv's kube-apiserver. Each test pushes its own release repo to realenv's git server:
// per environment a ConfigMap (what the promotion edits: data.tag and a version label) and a
// kustomization.yaml, plus clusters/<id>/ with the environments' namespaces and child
// Kustomizations. A parent Kustomization "<id>" applies clusters/<id>/, so the children carry
// kustomize-controller's kustomize.toolkit.fluxcd.io/name label: the Flux ApplicationSet.

var (
	gvrGitRepo = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "gitrepositories"}
	gvrKust    = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
	gvrCM      = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

type realFlux struct {
	*realEnv
	dyn   dynamic.Interface
	ns    string            // Flux's namespace
	fenv  map[string]string // flux.env
	envs  []string
	agent *agent.Client
}

func realFluxSetup(t *testing.T, envs ...string) *realFlux {
	t.Helper()
	envFile := os.Getenv("PRFLOW_REALENV")
	if envFile == "" {
		t.Skip("set PRFLOW_REALENV to realenv.env (after ../shared/realenv/up.sh and deploy/e2e/flux/up.sh) to run against real Flux")
	}
	dir := filepath.Dir(envFile)
	fluxEnv := filepath.Join(dir, "flux.env")
	if _, err := os.Stat(fluxEnv); err != nil {
		t.Fatalf("real Flux is not running: %v (build it with deploy/e2e/flux/build.sh, start it with deploy/e2e/flux/up.sh)", err)
	}
	vars := readEnvFile(t, envFile)
	fenv := readEnvFile(t, fluxEnv)
	for _, c := range []string{"source-controller", "kustomize-controller"} {
		pid := fenv[strings.ToUpper(strings.ReplaceAll(c, "-", "_"))+"_PID"]
		if cmd, err := os.ReadFile("/proc/" + pid + "/cmdline"); err != nil || !strings.Contains(string(cmd), c) {
			t.Fatalf("%s (pid %q in %s) is not running: start Flux with deploy/e2e/flux/up.sh", c, pid, fluxEnv)
		}
	}
	id := fmt.Sprintf("f%s%d", strings.ToLower(strings.TrimPrefix(t.Name(), "TestRealFlux"))[:min(5, len(t.Name())-12)], time.Now().UnixNano()%1e5)
	r := &realEnv{t: t, vars: vars, dir: dir, home: filepath.Join(dir, "data", "home"), id: id, repo: id, set: id}
	gitBase := strings.TrimSuffix(vars["GIT_URL"], "/demo.git")
	r.url = gitBase + "/" + r.repo + ".git"
	f := &realFlux{realEnv: r, ns: fenv["FLUX_NAMESPACE"], fenv: fenv, envs: envs}
	cfg, err := clientcmd.BuildConfigFromFlags("", vars["KUBECONFIG"])
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", vars["KUBECONFIG"], err)
	}
	if f.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	var children strings.Builder
	for _, e := range envs {
		files["envs/"+e+"/cm.yaml"] = fluxConfigMap("1.4.1")
		files["envs/"+e+"/kustomization.yaml"] = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - cm.yaml\n"
		fmt.Fprintf(&children, "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s-%s\n", id, e)
		fmt.Fprintf(&children, "---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: %[1]s-%[2]s\n"+
			"  namespace: %[3]s\n  labels:\n    harness.io/serviceRef: %[1]s\n    harness.io/envRef: %[2]s\nspec:\n  interval: 10m\n"+
			"  path: ./envs/%[2]s\n  prune: true\n  targetNamespace: %[1]s-%[2]s\n  sourceRef:\n    kind: GitRepository\n    name: %[1]s\n",
			id, e, f.ns)
	}
	files["clusters/"+id+"/apps.yaml"] = children.String()
	r.seedFiles(files)
	p, err := local.New(gitBase)
	if err != nil {
		t.Fatal(err)
	}
	r.e = ctltest.New(t, ctltest.Options{Concurrency: 8, Listen: "127.0.0.1:0",
		Services: map[string]any{steps.ServiceSCM: connector.Static{"release": p}},
		Tuning:   queue.ConsumerTuning{AckWait: 10 * time.Second, MaxDeliver: 5}})
	r.log = slog.New(slog.NewJSONHandler(r.e.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f.create(gvrGitRepo, map[string]any{"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": id, "namespace": f.ns},
		"spec":     map[string]any{"url": r.url, "ref": map[string]any{"branch": "main"}, "interval": "10m"}})
	f.create(gvrKust, map[string]any{"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
		"metadata": map[string]any{"name": id, "namespace": f.ns},
		"spec": map[string]any{"interval": "10m", "path": "./clusters/" + id, "prune": true,
			"sourceRef": map[string]any{"kind": "GitRepository", "name": id}}})
	t.Cleanup(func() {
		// Deleting the parent prunes the children (whose finalizers prune their ConfigMaps)
		// and the namespaces.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = f.dyn.Resource(gvrKust).Namespace(f.ns).Delete(ctx, id, metav1.DeleteOptions{})
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			if l, err := f.dyn.Resource(gvrKust).Namespace(f.ns).List(ctx, metav1.ListOptions{LabelSelector: "harness.io/serviceRef=" + id}); err == nil && len(l.Items) == 0 {
				break
			}
		}
		_ = f.dyn.Resource(gvrGitRepo).Namespace(f.ns).Delete(ctx, id, metav1.DeleteOptions{})
		if t.Failed() {
			t.Logf("prflow logs (last 20000 bytes):\n%s", tail(r.e.Logs.String(), 20000))
		}
	})
	// Every child Kustomization Ready on the seeded commit before the agent starts.
	for _, e := range envs {
		f.waitKust(id+"-"+e, 2*time.Minute, func(k *unstructured.Unstructured) bool { return ready(k) == "True" })
	}
	return f
}

// fluxConfigMap is an environment's manifest: the promotion sets data.tag and the version label.
func fluxConfigMap(tag string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  labels:\n    version: \"" + tag + "\"\ndata:\n  tag: \"" + tag + "\"\n"
}

func (f *realFlux) create(gvr schema.GroupVersionResource, obj map[string]any) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.dyn.Resource(gvr).Namespace(f.ns).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		f.t.Fatalf("create %s %s: %v", gvr.Resource, f.id, err)
	}
}

// ready is the Ready condition's status ("" when there is none).
func ready(k *unstructured.Unstructured) string {
	s, _, _ := readyCond(k)
	return s
}

func readyCond(k *unstructured.Unstructured) (status, message string, at time.Time) {
	conds, _, _ := unstructured.NestedSlice(k.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			at, _ = time.Parse(time.RFC3339, fmt.Sprint(m["lastTransitionTime"]))
			return fmt.Sprint(m["status"]), fmt.Sprint(m["message"]), at
		}
	}
	return "", "", time.Time{}
}

func (f *realFlux) kust(name string) *unstructured.Unstructured {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k, err := f.dyn.Resource(gvrKust).Namespace(f.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return k
}

// waitKust polls Kustomization name until cond holds.
func (f *realFlux) waitKust(name string, d time.Duration, cond func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	f.t.Helper()
	var k *unstructured.Unstructured
	for end := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		if k = f.kust(name); k != nil && cond(k) {
			return k
		}
		if time.Now().After(end) {
			f.t.Fatalf("Kustomization %s/%s: condition not met in %s; last seen: %v", f.ns, name, d, k)
		}
	}
}

// deployedTag is data.tag of an environment's ConfigMap in the cluster ("" when absent).
func (f *realFlux) deployedTag(env string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cm, err := f.dyn.Resource(gvrCM).Namespace(f.id+"-"+env).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		return ""
	}
	tag, _, _ := unstructured.NestedString(cm.Object, "data", "tag")
	return tag
}

// startAgent runs the Flux agent "flux" in process against realenv's kube-apiserver and waits
// until it leads with a fresh view and has a record per environment.
func (f *realFlux) startAgent(o flux.Options) {
	f.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", f.vars["KUBECONFIG"])
	if err != nil {
		f.t.Fatal(err)
	}
	o.AgentID, o.Replica, o.Config, o.Namespace, o.Log = "flux", "r1", cfg, f.ns, f.log
	a, err := flux.New(o)
	if err != nil {
		f.t.Fatal(err)
	}
	runUntilEnd(f.t, func(ctx context.Context) { _ = a.Run(ctx, f.e.Conn) })
	b, err := queue.OpenBuckets(context.Background(), f.e.Conn.JS)
	if err != nil {
		f.t.Fatal(err)
	}
	f.agent = agent.NewClient(f.e.Conn.NC, b.Apps, b.Agents)
	deadline := time.Now().Add(time.Minute)
	for _, env := range f.envs {
		for {
			st, err := f.agent.Status(context.Background(), "flux", f.id+"-"+env)
			if err == nil && st.Health == "Healthy" && st.Sync == "Synced" && f.agent.View(context.Background(), "flux").Fresh {
				break
			}
			if time.Now().After(deadline) {
				f.t.Fatalf("%s-%s never Healthy and Synced in agent flux's records: %+v %v", f.id, env, st, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// pipeline is promoPipeline on agent "flux" and this test's repo, service and parent
// Kustomization, editing each environment's cm.yaml; prod is the last entry.
func (f *realFlux) pipeline(envs string) string {
	return strings.NewReplacer("agent: sim", "agent: flux", "dev-eu", "in-cluster", "staging-eu", "in-cluster", "prod-eu", "in-cluster",
		"service: {name: web}", "service: {name: "+f.id+"}", "applicationSet: web", "applicationSet: "+f.id,
		"repo: acme/release", "repo: "+f.repo, "envs/<+env.name>/config.json", "envs/<+env.name>/cm.yaml",
		`image.tag: "${{ inputs.tag }}"`, `data.tag: "${{ inputs.tag }}"`+"\n    metadata.labels.version: \"${{ inputs.tag }}\"",
		"MERGE", "merge", "  mergeStrategy:", "  preview: false\n  mergeStrategy:",
		"  environments:\n    - dev\n    - {name: staging, soak: 300ms}\n    - PROD\n", "  environments:\n"+envs).Replace(promoPipeline)
}

// watchReady records, per Kustomization, when the test first saw it Ready=True having applied
// each revision: Flux's own view of "deployed", to compare with prflow's.
func (f *realFlux) watchReady(ctx context.Context) func(name, sha string) time.Time {
	type key struct{ name, sha string }
	seen := map[key]time.Time{}
	mu := make(chan struct{}, 1)
	mu <- struct{}{}
	go func() {
		for ctx.Err() == nil {
			w, err := f.dyn.Resource(gvrKust).Namespace(f.ns).Watch(ctx, metav1.ListOptions{LabelSelector: "harness.io/serviceRef=" + f.id})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				k, ok := ev.Object.(*unstructured.Unstructured)
				if !ok || ready(k) != "True" {
					continue
				}
				rev, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision")
				sha := rev[strings.LastIndex(rev, ":")+1:]
				<-mu
				if _, ok := seen[key{k.GetName(), sha}]; !ok {
					seen[key{k.GetName(), sha}] = time.Now()
				}
				mu <- struct{}{}
			}
			w.Stop()
		}
	}()
	return func(name, sha string) time.Time {
		<-mu
		defer func() { mu <- struct{}{} }()
		return seen[key{name, sha}]
	}
}

func TestRealFluxPromotion(t *testing.T) {
	envs := []string{"dev", "staging", "prod"}
	f := realFluxSetup(t, envs...)
	f.startAgent(flux.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	readyAt := f.watchReady(ctx)
	r := f.e.Wait(f.e.Start(f.pipeline("    - dev\n    - staging\n    - prod\n"), map[string]any{"tag": "1.5.0"}).ID, 5*time.Minute)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	for _, env := range envs {
		app := f.id + "-" + env
		if got := f.file("envs/" + env + "/cm.yaml"); got != fluxConfigMap("1.5.0") {
			t.Errorf("envs/%s/cm.yaml not promoted as written:\n%s", env, got)
		}
		if tag := f.deployedTag(env); tag != "1.5.0" {
			t.Errorf("%s: ConfigMap data.tag %q in the cluster, want 1.5.0", env, tag)
		}
		merge, sync := ctltest.Step(r, env, "merge"), ctltest.Step(r, env, "sync")
		sha := fmt.Sprint(merge.Outputs["commitId"])
		syncedOn(t, r, env, "sync", app, sha)
		// All environments share one GitRepository: once prod's merge is fetched, every
		// Kustomization applies that head, so Flux's own record ends on it everywhere.
		last := fmt.Sprint(ctltest.Step(r, "prod", "merge").Outputs["commitId"])
		k := f.waitKust(app, time.Minute, func(k *unstructured.Unstructured) bool {
			rev, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision")
			return ready(k) == "True" && rev == "main@sha1:"+last
		})
		_, _, transition := readyCond(k)
		fluxSaw := readyAt(app, sha)
		t.Logf("REALTIME flux %s: merge→Ready seen by prflow (sync step ended) %v; merge→Ready seen by a watch on the Kustomization %v; Ready lastTransitionTime after the run %s (1 s resolution)",
			env, sync.Ended.Sub(merge.Ended).Round(time.Millisecond), durSince(merge.Ended, fluxSaw), transition.Format(time.TimeOnly))
	}
}

func durSince(from, to time.Time) string {
	if to.IsZero() {
		return "not seen (Ready did not change: the transition time is the seeded commit's)"
	}
	return to.Sub(from).Round(time.Millisecond).String()
}

// A change the API server refuses (a semver build "1.6.0+bad" is not a valid label value):
// kustomize-controller's dry-run fails, the Kustomization turns Ready=False with that message,
// the stage fails with Flux's message and the change is reverted; the revert deploys.
func TestRealFluxBadChangeRollsBack(t *testing.T) {
	f := realFluxSetup(t, "dev")
	f.startAgent(flux.Options{})
	before := f.file("envs/dev/cm.yaml")
	r := f.e.Wait(f.e.Start(f.pipeline("    - dev\n"), map[string]any{"tag": "1.6.0+bad"}).ID, 5*time.Minute)
	app := f.id + "-dev"
	k := f.kust(app)
	status, msg, _ := readyCond(k)
	if r.Status != pipelines.StFailed || !strings.Contains(r.Error, app+" (agent flux)") || !strings.Contains(r.Error, `Invalid value: "1.6.0+bad"`) {
		t.Fatalf("run %s %q, want failed on %s with Flux's message (Kustomization now Ready=%s %q)\n%s", r.Status, r.Error, app, status, msg, describeRun(r))
	}
	t.Logf("stage failed with: %s", r.Error)
	mergeRevert := ctltest.Step(r, "dev", "mergeRevert")
	if mergeRevert == nil || mergeRevert.Status != pipelines.StSucceeded {
		t.Fatalf("revert not merged: %+v\n%s", mergeRevert, describeRun(r))
	}
	if got := f.file("envs/dev/cm.yaml"); got != before {
		t.Errorf("envs/dev/cm.yaml not reverted:\n%s", got)
	}
	revert := fmt.Sprint(mergeRevert.Outputs["commitId"])
	// The revert reaches Flux: Ready=True on the revert commit, and the cluster still has 1.4.1.
	f.waitKust(app, 2*time.Minute, func(k *unstructured.Unstructured) bool {
		rev, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision")
		return ready(k) == "True" && strings.HasSuffix(rev, revert)
	})
	if tag := f.deployedTag("dev"); tag != "1.4.1" {
		t.Errorf("ConfigMap data.tag %q after the rollback, want 1.4.1", tag)
	}
	st, err := f.agent.Status(context.Background(), "flux", app)
	for end := time.Now().Add(time.Minute); (err != nil || st.SyncedRevision != revert || st.Health != "Healthy") && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		st, err = f.agent.Status(context.Background(), "flux", app)
	}
	if err != nil || st.SyncedRevision != revert || st.Health != "Healthy" {
		t.Errorf("%s after the rollback: %+v %v", app, st, err)
	}
}

// source-controller frozen (SIGSTOP) while a sync waits for it: the reconcile request is not
// handled, the agent marks the record stale (never judged), nothing is reverted; once
// source-controller runs again the same run deploys the change.
func TestRealFluxSourceStoppedIsStale(t *testing.T) {
	f := realFluxSetup(t, "dev")
	f.startAgent(flux.Options{StuckAfter: 5 * time.Second, SourceWait: 5 * time.Second})
	pid := 0
	if _, err := fmt.Sscan(f.fenv["SOURCE_CONTROLLER_PID"], &pid); err != nil || pid <= 0 {
		t.Fatalf("flux.env: SOURCE_CONTROLLER_PID %q", f.fenv["SOURCE_CONTROLLER_PID"])
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP source-controller (pid %d): %v", pid, err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT source-controller (pid %d): %v", pid, err)
			}
		}
	}
	t.Cleanup(resume)
	app := f.id + "-dev"
	run := f.e.Start(f.pipeline("    - dev\n"), map[string]any{"tag": "1.7.0"})
	// The record goes stale, naming source-controller.
	var st *agent.AppStatus
	var err error
	for end := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		st, err = f.agent.Status(context.Background(), "flux", app)
		if err == nil && st.Stale != nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%s never stale while source-controller is stopped: %+v %v\n%s", app, st, err, describeRun(f.run(run.ID)))
		}
	}
	t.Logf("stale record: %+v", *st.Stale)
	if !strings.Contains(fmt.Sprint(*st.Stale), "source-controller") {
		t.Errorf("staleness %+v does not name source-controller", *st.Stale)
	}
	cur := f.run(run.ID)
	if cur.Status.Terminal() {
		t.Fatalf("run ended while source-controller was stopped: %s %s\n%s", cur.Status, cur.Error, describeRun(cur))
	}
	if rv := ctltest.Step(cur, "dev", "revert"); rv != nil && rv.Status != pipelines.StPending {
		t.Fatalf("a revert started on a stale view: %s\n%s", rv.Status, describeRun(cur))
	}
	if tag := f.deployedTag("dev"); tag != "1.4.1" {
		t.Errorf("ConfigMap data.tag %q with source-controller stopped, want 1.4.1", tag)
	}
	resume()
	r := f.e.Wait(run.ID, 5*time.Minute)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s after source-controller resumed: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	if rv := ctltest.Step(r, "dev", "revert"); rv != nil && rv.Status != pipelines.StPending {
		t.Errorf("reverted: %s", rv.Status)
	}
	if tag := f.deployedTag("dev"); tag != "1.7.0" {
		t.Errorf("ConfigMap data.tag %q after source-controller resumed, want 1.7.0", tag)
	}
}

func (f *realFlux) run(id string) *pipelines.Run {
	cur, err := f.e.Ctl.Get(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return cur
}

// A suspended Kustomization: the sync is refused, naming it and spec.suspend, and Flux applies
// nothing.
func TestRealFluxSuspendedRefused(t *testing.T) {
	f := realFluxSetup(t, "dev")
	app := f.id + "-dev"
	ctx := context.Background()
	if _, err := f.dyn.Resource(gvrKust).Namespace(f.ns).Patch(ctx, app, types.MergePatchType, []byte(`{"spec":{"suspend":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("suspend %s: %v", app, err)
	}
	f.envs = nil // its record is Suspended, not Healthy
	f.startAgent(flux.Options{})
	for end := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		st, err := f.agent.Status(ctx, "flux", app)
		if err == nil && st.Health == "Suspended" {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%s not Suspended in the agent's record: %+v %v", app, st, err)
		}
	}
	r := f.e.Wait(f.e.Start(f.pipeline("    - dev\n"), map[string]any{"tag": "1.8.0"}).ID, 5*time.Minute)
	if r.Status != pipelines.StFailed || !strings.Contains(r.Error, "suspend") || !strings.Contains(r.Error, app) {
		t.Fatalf("run %s %q, want refused: %s is suspended\n%s", r.Status, r.Error, app, describeRun(r))
	}
	t.Logf("refused with: %s", r.Error)
	if tag := f.deployedTag("dev"); tag != "1.4.1" {
		t.Errorf("ConfigMap data.tag %q under a suspended Kustomization, want 1.4.1", tag)
	}
}
