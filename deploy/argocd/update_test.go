package argocd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocdtest"
)

func strp(s string) *string { return &s }

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// helmApp is app() with Helm settings the agent must keep: inline values, a parameter with
// forceString, and a file parameter named like a parameter.
func helmApp(name string) argocdtest.Application {
	a := app(name, "apps/web", nil)
	a.Spec.Source.Helm = json.RawMessage(`{"values":"replicas: 1\n","parameters":[{"name":"image.tag","value":"1.0"},{"name":"port","value":"80","forceString":true}],"fileParameters":[{"name":"image.tag","path":"files/tag"}]}`)
	return a
}

// kustApp is app() with Kustomize settings, a replica count written as a string (intstr).
func kustApp(name string) argocdtest.Application {
	a := app(name, "apps/api", nil)
	a.Spec.Source.Kustomize = json.RawMessage(`{"images":["nginx=reg/nginx:1"],"replicas":[{"name":"web","count":"3"}]}`)
	return a
}

// source reads the fake's stored source (index -1: spec.source) as generic JSON.
func (w *world) source(name string, idx int) map[string]any {
	w.t.Helper()
	a, ok := w.argo.App(name)
	if !ok {
		w.t.Fatalf("app %s is gone", name)
	}
	var v any = a.Spec.Source
	if idx >= 0 {
		v = a.Spec.Sources[idx]
	}
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

func TestUpdateAgainstArgoCD(t *testing.T) {
	w := newWorld(t)
	w.git.Commit(repoURL, "release-2", map[string]string{"apps/web/cm.yaml": strings.Replace(healthyCM, "cfg", "cfg2", 1)})
	w.addApp(helmApp("web"), argocdtest.Deployed())
	w.addApp(kustApp("api"))
	multi := app("multi", "", nil)
	multi.Spec.Source = nil
	multi.Spec.Sources = []argocdtest.ApplicationSource{
		{RepoURL: repoURL, Path: "apps/web", TargetRevision: "main", Name: "manifests"},
		{RepoURL: repoURL, Path: "apps/api", TargetRevision: "main", Name: "values", Helm: json.RawMessage(`{"parameters":[{"name":"a","value":"1"}]}`)},
	}
	w.addApp(multi)
	var logs bytes.Buffer
	w.start("eu", "r1", func(o *Options, _ *Client) { o.Log = slog.New(slog.NewTextHandler(&logs, nil)) })
	ctx := context.Background()

	cases := []struct {
		name  string
		req   agent.UpdateRequest
		err   error  // wanted error, nil for success
		msg   string // in the error
		check func(t *testing.T, rep *agent.UpdateReply)
	}{
		{name: "helm parameter merged by name; values, forceString and file parameters kept",
			req: agent.UpdateRequest{App: "web", Patch: agent.SourcePatch{Helm: &agent.HelmPatch{Parameters: []agent.HelmParameter{
				{Name: "image.tag", Value: "s3cr3t-2.0"}, {Name: "debug", Value: "true"}}}}, RunID: "run1", Step: "dev/upd"},
			check: func(t *testing.T, rep *agent.UpdateReply) {
				h := w.source("web", -1)["helm"].(map[string]any)
				b, _ := json.Marshal(h)
				want := `{"fileParameters":[{"name":"image.tag","path":"files/tag"}],"parameters":[{"name":"image.tag","value":"s3cr3t-2.0"},{"forceString":true,"name":"port","value":"80"},{"name":"debug","value":"true"}],"values":"replicas: 1\n"}`
				if string(b) != want {
					t.Errorf("helm:\n got %s\nwant %s", b, want)
				}
				if rep.Before.Helm.Parameters[0].Value != "1.0" || rep.After.Helm.Parameters[0].Value != "s3cr3t-2.0" || !rep.Changed {
					t.Errorf("reply before/after: %+v %+v", rep.Before.Helm, rep.After.Helm)
				}
			}},
		{name: "kustomize image merged by name; untouched replicas keep their string count",
			req: agent.UpdateRequest{App: "api", Patch: agent.SourcePatch{Kustomize: &agent.KustomizePatch{Images: []string{"nginx:1.25", "redis:7"}}}},
			check: func(t *testing.T, _ *agent.UpdateReply) {
				k, _ := json.Marshal(w.source("api", -1)["kustomize"])
				if string(k) != `{"images":["nginx:1.25","redis:7"],"replicas":[{"count":"3","name":"web"}]}` {
					t.Errorf("kustomize %s", k)
				}
			}},
		{name: "same values again: nothing written",
			req: agent.UpdateRequest{App: "api", Patch: agent.SourcePatch{Kustomize: &agent.KustomizePatch{Images: []string{"redis:7"}}}},
			check: func(t *testing.T, rep *agent.UpdateReply) {
				if rep.Changed {
					t.Errorf("Changed for a patch the app already had")
				}
			}},
		{name: "targetRevision: the app turns OutOfSync and is not synced",
			req: agent.UpdateRequest{App: "web", Patch: agent.SourcePatch{TargetRevision: strp("release-2")}},
			check: func(t *testing.T, rep *agent.UpdateReply) {
				if rep.After.TargetRevision != "release-2" || rep.Before.TargetRevision != "main" {
					t.Errorf("reply %+v -> %+v", rep.Before, rep.After)
				}
				w.waitRecord("eu", "web", "OutOfSync at release-2", func(s *agent.AppStatus) bool {
					return s != nil && s.Sync == agent.SyncOutOfSync && s.Source.TargetRevision == "release-2"
				})
				if a, _ := w.argo.App("web"); a.Operation != nil {
					t.Errorf("the update started an operation: %+v", a.Operation)
				}
			}},
		{name: "a revision Argo CD cannot resolve is refused, nothing written",
			req: agent.UpdateRequest{App: "web", Patch: agent.SourcePatch{TargetRevision: strp("no-such-branch")}},
			err: agent.ErrRejected, msg: "InvalidSpecError"},
		{name: "Kustomize values on a Helm app are refused by Argo CD's validation",
			req: agent.UpdateRequest{App: "web", Patch: agent.SourcePatch{Kustomize: &agent.KustomizePatch{Images: []string{"x:1"}}}},
			err: agent.ErrRejected, msg: "multiple application sources defined"},
		{name: "unknown app", req: agent.UpdateRequest{App: "ghost", Patch: agent.SourcePatch{TargetRevision: strp("main")}},
			err: agent.ErrNotFound, msg: "ghost"},
		{name: "multi-source app without source", req: agent.UpdateRequest{App: "multi", Patch: agent.SourcePatch{TargetRevision: strp("main")}},
			err: agent.ErrInvalid, msg: "choose one with source: its name or index: 0 (manifests), 1 (values)"},
		{name: "source given for a single-source app", req: agent.UpdateRequest{App: "web", Source: "values", Patch: agent.SourcePatch{TargetRevision: strp("main")}},
			err: agent.ErrInvalid, msg: "single source"},
		{name: "multi-source app, source by name",
			req: agent.UpdateRequest{App: "multi", Source: "values", Patch: agent.SourcePatch{Helm: &agent.HelmPatch{Parameters: []agent.HelmParameter{{Name: "b", Value: "2"}}}}},
			check: func(t *testing.T, rep *agent.UpdateReply) {
				if rep.Before.Index != 1 || rep.Before.Name != "values" {
					t.Errorf("selected source %+v", rep.Before)
				}
				h, _ := json.Marshal(w.source("multi", 1)["helm"])
				if string(h) != `{"parameters":[{"name":"a","value":"1"},{"name":"b","value":"2"}]}` {
					t.Errorf("sources[1].helm %s", h)
				}
				if _, ok := w.source("multi", 0)["helm"]; ok {
					t.Errorf("sources[0] changed: %v", w.source("multi", 0))
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			beforeApp, _ := w.argo.App(c.req.App)
			rep, err := w.client.Update(ctx, "eu", c.req)
			if c.err != nil {
				if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.msg) {
					t.Fatalf("err = %v, want %v with %q", err, c.err, c.msg)
				}
				after, _ := w.argo.App(c.req.App)
				if a, b := mustJSON(t, beforeApp.Spec), mustJSON(t, after.Spec); a != b {
					t.Errorf("a refused update changed the app:\n%s\n%s", a, b)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, rep)
		})
	}
	if strings.Contains(logs.String(), "s3cr3t") {
		t.Errorf("a Helm value reached the agent's log:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "helm.parameters.image.tag") {
		t.Errorf("the log does not say which fields changed:\n%s", logs.String())
	}
}

// A request repeated by the same run and step (a redelivered job) reports the source the first
// delivery replaced, not the one it wrote, so a rollback restores the right values.
func TestUpdateRepeatedByTheSameStepReportsTheOriginalSource(t *testing.T) {
	w := newWorld(t)
	w.addApp(helmApp("web"))
	w.start("eu", "r1")
	req := agent.UpdateRequest{App: "web", RunID: "run1", Step: "dev/upd",
		Patch: agent.SourcePatch{Helm: &agent.HelmPatch{Parameters: []agent.HelmParameter{{Name: "image.tag", Value: "2.0"}}}}}
	first, err := w.client.Update(context.Background(), "eu", req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := w.client.Update(context.Background(), "eu", req)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Repeated || again.Before.Helm.Parameters[0].Value != "1.0" || !again.Changed || !again.Before.Equal(*first.Before) {
		t.Errorf("repeat: repeated=%v changed=%v before=%+v", again.Repeated, again.Changed, again.Before.Helm)
	}
	req.Step = "dev/other"
	other, err := w.client.Update(context.Background(), "eu", req)
	if err != nil || other.Repeated || other.Before.Helm.Parameters[0].Value != "2.0" {
		t.Errorf("another step: %+v %v", other, err)
	}
}

// Someone changes the app between the agent's read and its write: Argo CD refuses the JSON
// patch (its resourceVersion test fails), the agent reads again and applies its change on top,
// so neither change is lost.
func TestUpdateReappliesOnTopOfAConcurrentChange(t *testing.T) {
	w := newWorld(t)
	w.addApp(helmApp("web"))
	w.start("eu", "r1")
	w.argo.InjectFault(argocdtest.Fault{Method: "PATCH", Path: "/api/v1/applications/web", Delay: 400 * time.Millisecond})
	w.argo.ResetRequests()
	done := make(chan error, 1)
	go func() {
		_, err := w.client.Update(context.Background(), "eu", agent.UpdateRequest{App: "web",
			Patch: agent.SourcePatch{Helm: &agent.HelmPatch{Parameters: []agent.HelmParameter{{Name: "ours", Value: "1"}}}}})
		done <- err
	}()
	w.eventually(5*time.Second, "the agent read the app", func() bool {
		for _, r := range w.argo.Requests() {
			if r.Method == "GET" && r.Path == "/api/v1/applications/web" {
				return true
			}
		}
		return false
	})
	cur, _ := w.argo.App("web")
	cur.Spec.Source.Helm = json.RawMessage(`{"values":"replicas: 1\n","parameters":[{"name":"image.tag","value":"1.0"},{"name":"theirs","value":"x"}]}`)
	if err := w.argo.UpdateApp(cur); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h, _ := json.Marshal(w.source("web", -1)["helm"])
	if !strings.Contains(string(h), `"theirs"`) || !strings.Contains(string(h), `"ours"`) {
		t.Errorf("a change was lost: %s", h)
	}
	patches := 0
	for _, r := range w.argo.Requests() {
		if r.Method == "PATCH" {
			patches++
		}
	}
	if patches != 2 {
		t.Errorf("%d PATCH requests, want 2 (one refused by the resourceVersion test, one applied)", patches)
	}
}

// An app that changes under every attempt: the update fails with ErrConflict saying so, and
// nothing of it is written.
func TestUpdateGivesUpClearlyWhenTheAppKeepsChanging(t *testing.T) {
	w := newWorld(t)
	w.addApp(app("web", "apps/web", nil))
	w.start("eu", "r1")
	w.argo.InjectFault(argocdtest.Fault{Method: "PATCH", Path: "/api/v1/applications/web", Delay: 150 * time.Millisecond, Times: -1})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			cur, _ := w.argo.App("web")
			cur.Metadata.Labels = map[string]string{"tick": fmt.Sprint(i)}
			_ = w.argo.UpdateApp(cur)
		}
	}()
	_, err := w.client.Update(context.Background(), "eu", agent.UpdateRequest{App: "web", Patch: agent.SourcePatch{TargetRevision: strp("v9")}})
	close(stop)
	wg.Wait()
	if !errors.Is(err, agent.ErrConflict) || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	if a, _ := w.argo.App("web"); a.Spec.Source.TargetRevision != "main" {
		t.Errorf("targetRevision %q written despite the conflict", a.Spec.Source.TargetRevision)
	}
}

// Many runs update one app at once through two agent replicas: every parameter arrives.
func TestConcurrentUpdatesThroughTwoReplicasLoseNothing(t *testing.T) {
	w := newWorld(t)
	w.addApp(helmApp("web"))
	w.start("eu", "r1")
	w.start("eu", "r2")
	const n = 8
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			_, err := w.client.Update(context.Background(), "eu", agent.UpdateRequest{App: "web", RunID: fmt.Sprint("run", i), Step: "s/u",
				Patch: agent.SourcePatch{Helm: &agent.HelmPatch{Parameters: []agent.HelmParameter{{Name: fmt.Sprint("p", i), Value: fmt.Sprint(i)}}}}})
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	h, _ := json.Marshal(w.source("web", -1)["helm"])
	for i := 0; i < n; i++ {
		if !strings.Contains(string(h), fmt.Sprintf(`"name":"p%d"`, i)) {
			t.Errorf("parameter p%d lost: %s", i, h)
		}
	}
}

// writeSource writes exactly the keys a patch touches: a touched key gets its new value or goes
// when that value is empty, an object left empty goes, and every key the patch did not touch
// stays as it was.
func TestWriteSourceWritesOnlyTouchedKeys(t *testing.T) {
	yes := true
	for _, tc := range []struct {
		name  string
		src   string
		patch agent.SourcePatch
		after agent.SourceSpec
		want  string
	}{{
		name:  "helm: parameters set, value files emptied, values kept",
		src:   `{"helm":{"values":"x","parameters":[{"name":"a","value":"1"}],"fileParameters":[{"name":"f","path":"f"}],"valueFiles":["a.yaml"]}}`,
		patch: agent.SourcePatch{Helm: &agent.HelmPatch{Parameters: []agent.HelmParameter{{Name: "a", Value: "2"}}, ValueFiles: &[]string{}}},
		// after leaves the untouched file parameters out: writeSource must not read them.
		after: agent.SourceSpec{Helm: &agent.HelmSpec{Parameters: []agent.HelmParameter{{Name: "a", Value: "2"}}}},
		want:  `{"helm":{"fileParameters":[{"name":"f","path":"f"}],"parameters":[{"name":"a","value":"2"}],"values":"x"}}`,
	}, {
		name:  "helm created where the source had none",
		src:   `{"path":"p"}`,
		patch: agent.SourcePatch{Helm: &agent.HelmPatch{FileParameters: []agent.HelmFileParameter{{Name: "f", Path: "files/f"}}}},
		after: agent.SourceSpec{Helm: &agent.HelmSpec{FileParameters: []agent.HelmFileParameter{{Name: "f", Path: "files/f"}}}},
		want:  `{"helm":{"fileParameters":[{"name":"f","path":"files/f"}]},"path":"p"}`,
	}, {
		name: "kustomize: every kind of key set or removed, images kept",
		src:  `{"kustomize":{"images":["nginx:1"],"namePrefix":"old-","commonLabels":{"team":"a"},"commonAnnotations":{"n":"1"}}}`,
		patch: agent.SourcePatch{TargetRevision: strp("v2"), Kustomize: &agent.KustomizePatch{
			Namespace: strp("shop"), NamePrefix: strp(""), NameSuffix: strp("-v2"),
			Replicas:           []agent.KustomizeReplica{{Name: "web", Count: 3}},
			RemoveCommonLabels: []string{"team"}, CommonAnnotations: map[string]string{"n": "2"},
			ForceCommonLabels: &yes, ForceCommonAnnotations: new(bool)}},
		after: agent.SourceSpec{TargetRevision: "v2", Kustomize: &agent.KustomizeSpec{
			Namespace: "shop", NameSuffix: "-v2", Replicas: []agent.KustomizeReplica{{Name: "web", Count: 3}},
			CommonAnnotations: map[string]string{"n": "2"}, ForceCommonLabels: true}},
		want: `{"kustomize":{"commonAnnotations":{"n":"2"},"forceCommonLabels":true,"images":["nginx:1"],"nameSuffix":"-v2","namespace":"shop","replicas":[{"name":"web","count":3}]},"targetRevision":"v2"}`,
	}, {
		name:  "kustomize left empty goes",
		src:   `{"kustomize":{"images":["nginx:1"]},"path":"p"}`,
		patch: agent.SourcePatch{Kustomize: &agent.KustomizePatch{RemoveImages: []string{"nginx"}}},
		after: agent.SourceSpec{Kustomize: &agent.KustomizeSpec{}},
		want:  `{"path":"p"}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var src map[string]any
			if err := json.Unmarshal([]byte(tc.src), &src); err != nil {
				t.Fatal(err)
			}
			writeSource(src, tc.patch, tc.after)
			if got, _ := json.Marshal(src); string(got) != tc.want {
				t.Fatalf("source after the patch:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}
