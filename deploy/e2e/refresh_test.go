package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/argocd"
	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/pipelines"
)

// envAppSet is the release repo's ApplicationSet: one app per envs/<env>/config.json.
func envAppSet() argocdtest.ApplicationSet {
	return argocdtest.ApplicationSet{
		Metadata: argocdtest.ObjectMeta{Name: "web"},
		Spec: argocdtest.ApplicationSetSpec{
			Generators: []argocdtest.ApplicationSetGenerator{{Git: &argocdtest.GitGenerator{RepoURL: repoURL, Revision: "main",
				Files: []argocdtest.GitFileGeneratorItem{{Path: "envs/*/config.json"}}}}},
			Template: argocdtest.ApplicationSetTemplate{
				Metadata: argocdtest.ApplicationSetTemplateMeta{Name: "web-{{env}}",
					Labels: map[string]string{"harness.io/serviceRef": "web", "harness.io/envRef": "{{env}}"}},
				Spec: argocdtest.ApplicationSpec{Project: "default",
					Source:      &argocdtest.ApplicationSource{RepoURL: repoURL, Path: "apps/web", TargetRevision: "main"},
					Destination: argocdtest.ApplicationDestination{Server: "https://kubernetes.default.svc", Namespace: "{{env}}"}},
			},
		},
	}
}

const newEnvPipeline = `name: new-env
inputs:
  commit: {type: string}
service: {name: web}
environments:
  - name: prod
    clusters: [{name: in-cluster, agent: eu}]
stages:
  - id: prod
    environment: prod
    steps:
      - {id: merge, type: MergePR, with: {commit: "${{ inputs.commit }}"}}
      - {id: linked, type: FetchLinkedApps, timeout: 60s, with: {appWaitTimeout: WAIT}}
      - {id: sync, type: GitOpsSync, timeout: 60s, with: {waitTillHealthy: true}}
`

// A new environment is merged; Argo CD's ApplicationSet controller would only see it at its
// next poll (180 s). FetchLinkedApps asks the agent to refresh the ApplicationSet, the app
// appears at once and the stage passes — with each way the agent can ask (the annotation
// through Argo CD's API, a signed push to the controller's webhook). With refresh off the
// same stage times out waiting for the app, which is what it did before.
func TestFetchLinkedAppsRefreshesApplicationSet(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		refresh argocd.AppSetRefreshOptions
		argo    []argocdtest.Option
		webhook bool
		wait    string
		pass    bool
	}{
		{name: "annotate", wait: "20s", pass: true},
		{name: "webhook", refresh: argocd.AppSetRefreshOptions{Mode: argocd.RefreshWebhook, WebhookSecret: "hook-secret"},
			argo: []argocdtest.Option{argocdtest.WithWebhookSecret("hook-secret")}, webhook: true, wait: "20s", pass: true},
		{name: "webhook with a wrong secret", refresh: argocd.AppSetRefreshOptions{Mode: argocd.RefreshWebhook, WebhookSecret: "wrong"},
			argo: []argocdtest.Option{argocdtest.WithWebhookSecret("hook-secret")}, webhook: true, wait: "2s"},
		{name: "off", refresh: argocd.AppSetRefreshOptions{Mode: argocd.RefreshOff}, wait: "2s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			argo := tc.argo
			var s *stack
			if tc.webhook {
				// The webhook URL is the fake's, known only once it runs: start the agent after.
				s = newStack(t, stackOpts{argo: argo, noAgent: true})
				tc.refresh.WebhookURL = s.argo.AppSetWebhookURL()
				s.appsetRefresh = tc.refresh
				s.startAgent("r1")
			} else {
				s = newStack(t, stackOpts{argo: argo, appsetRefresh: tc.refresh})
			}
			s.git.Commit(repoURL, "main", map[string]string{"envs/dev/config.json": `{"env": "dev"}`})
			if err := s.argo.AddApplicationSet(envAppSet()); err != nil {
				t.Fatal(err)
			}
			s.waitRecord("web-dev")
			sha := s.git.Commit(repoURL, "main", map[string]string{"envs/prod/config.json": `{"env": "prod"}`})
			start := time.Now()
			r := s.wait(s.start(strings.Replace(newEnvPipeline, "WAIT", tc.wait, 1), map[string]any{"commit": sha}).ID, 60*time.Second)
			took := time.Since(start)
			if !tc.pass {
				st := step(r, "prod", "linked")
				if r.Status != pipelines.StFailed || !strings.Contains(st.Error, "no app (harness.io/serviceRef=web, harness.io/envRef=prod)") {
					t.Fatalf("want the step to time out waiting for web-prod: %s %q", r.Status, st.Error)
				}
				if _, ok := s.argo.App("web-prod"); ok {
					t.Fatal("web-prod exists without a refresh")
				}
				if tc.webhook && !strings.Contains(s.logs.String(), "HMAC verification failed") {
					t.Fatalf("the rejected webhook is not logged:\n%s", s.logs.String())
				}
				if strings.Contains(s.logs.String(), "wrong") {
					t.Fatal("the webhook secret reached a log")
				}
				return
			}
			if r.Status != pipelines.StSucceeded {
				t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
			}
			if n := s.argo.AppSetRefreshes(); n != 1 {
				t.Fatalf("ApplicationSet refreshes = %d, want 1", n)
			}
			if tc.webhook && s.argo.WebhookEvents() != 1 {
				t.Fatalf("webhook events = %d", s.argo.WebhookEvents())
			}
			if st := step(r, "prod", "linked"); st.Wake != 0 && !tc.webhook {
				// Annotate mode waits for the regeneration, so the app is there at once.
				t.Fatalf("FetchLinkedApps parked %d times after an annotate refresh", st.Wake)
			}
			apps := appsOut(step(r, "prod", "sync"))
			if len(apps) != 1 || apps[0]["name"] != "web-prod" || apps[0]["syncedRevision"] != sha || apps[0]["health"] != "Healthy" {
				t.Fatalf("sync output %v", apps)
			}
			if strings.Contains(s.logs.String(), "hook-secret") {
				t.Fatal("the webhook secret reached a log")
			}
			t.Logf("%s: new environment deployed in %s", tc.name, took.Round(time.Millisecond))
		})
	}
}

// A merge changes a parameter the ApplicationSet renders into the app's spec (here the source
// path, in the example release repo the image tag). GitOpsSync with no FetchLinkedApps before
// it has the set regenerated before it syncs, so the new spec is what gets deployed; with
// refresh off the app keeps its old spec until Argo CD's poll.
func TestGitOpsSyncRegeneratesAppSetAfterMerge(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{argocd.RefreshAnnotate, argocd.RefreshOff} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			s := newStack(t, stackOpts{appsetRefresh: argocd.AppSetRefreshOptions{Mode: mode}})
			s.git.Commit(repoURL, "main", map[string]string{
				"envs/dev/config.json": `{"env": "dev", "dir": "apps/web"}`,
				"apps/web2/cm.yaml":    configMap("web2", "healthy"),
			})
			as := envAppSet()
			as.Spec.Template.Spec.Source.Path = "{{dir}}"
			if err := s.argo.AddApplicationSet(as); err != nil {
				t.Fatal(err)
			}
			s.waitRecord("web-dev")
			sha := s.git.Commit(repoURL, "main", map[string]string{"envs/dev/config.json": `{"env": "dev", "dir": "apps/web2"}`})
			src := pipeline("      - {id: sync, type: GitOpsSync, timeout: 30s, with: {waitTillHealthy: true, applicationsList: [{applicationName: web-dev, agentId: eu}]}}\n", true)
			r := s.wait(s.start(src, map[string]any{"commit": sha}).ID, 60*time.Second)
			if r.Status != pipelines.StSucceeded {
				t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
			}
			a, _ := s.argo.App("web-dev")
			want := "apps/web2"
			if mode == argocd.RefreshOff {
				want = "apps/web"
			}
			if a.Spec.Source.Path != want {
				t.Fatalf("web-dev deploys %s, want %s", a.Spec.Source.Path, want)
			}
		})
	}
}

// The agent is down when FetchLinkedApps asks for the ApplicationSet refresh after the merge:
// the step asks again once the agent is back (it used to give up on the first try, so a new
// environment waited for Argo CD's 3-minute poll, and a changed one was synced with the spec
// rendered before the merge).
func TestFetchLinkedAppsRefreshesOnceTheAgentIsBack(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{noAgent: true})
	s.git.Commit(repoURL, "main", map[string]string{"envs/dev/config.json": `{"env": "dev"}`})
	if err := s.argo.AddApplicationSet(envAppSet()); err != nil {
		t.Fatal(err)
	}
	sha := s.git.Commit(repoURL, "main", map[string]string{"envs/prod/config.json": `{"env": "prod"}`})
	run := s.start(strings.Replace(newEnvPipeline, "WAIT", "20s", 1), map[string]any{"commit": sha})
	s.waitStep(run.ID, "prod", "linked", "parked on the offline agent", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && st.Wait != nil && strings.Contains(st.Wait.Reason, "cannot see Argo CD")
	})
	s.startAgent("r1")
	r := s.wait(run.ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	if n := s.argo.AppSetRefreshes(); n != 1 {
		t.Errorf("ApplicationSet refreshes = %d, want 1 (asked again once the agent was back)", n)
	}
	if apps := appsOut(step(r, "prod", "sync")); len(apps) != 1 || apps[0]["name"] != "web-prod" || apps[0]["health"] != "Healthy" {
		t.Errorf("sync output %v", apps)
	}
}
