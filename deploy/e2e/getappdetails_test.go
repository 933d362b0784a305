package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/argocdtest"
	"github.com/prflow/prflow/pipelines"
)

func detailsStep(with string) string {
	return "      - id: details\n        type: GitOpsGetAppDetails\n        timeout: 60s\n        with: " + with + "\n"
}

// GetAppDetails reads the apps a pipeline names from the agent (a hard refresh goes through
// the agent to Argo CD), returns only those of the stage (its service and environment labels,
// its clusters) in Harness's applications output, and fails, naming why, when none is.
func TestGetAppDetailsReadsTheStagesApps(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.addApp(app("web-dev", "apps/web", map[string]string{"harness.io/serviceRef": "web", "harness.io/envRef": "dev"}))
	s.addApp(app("web-prod", "apps/web", map[string]string{"harness.io/serviceRef": "web", "harness.io/envRef": "prod"}))
	s.waitRecord("web-dev")
	s.waitRecord("web-prod")
	for _, tc := range []struct {
		name, with string
		want       []string
		hard       bool
	}{
		{"list", "{applicationsList: [{applicationName: web-dev, agentId: eu}]}", []string{"web-dev"}, false},
		{"regex keeps the stage's apps only", "{applicationRegex: \"^web-\"}", []string{"web-dev"}, false},
		{"name on the stage's agent, hard refresh", "{applicationName: web-dev, hardRefresh: true}", []string{"web-dev"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := hardRefreshes(s, "web-dev")
			r := s.wait(s.start(pipeline(detailsStep(tc.with), false), nil).ID, 60*time.Second)
			if r.Status != pipelines.StSucceeded {
				t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
			}
			list, _ := step(r, "dev", "details").Outputs["applications"].([]any)
			var names []string
			for _, e := range list {
				m := e.(map[string]any)
				names = append(names, fmt.Sprint(m["name"]))
				app := m["app"].(map[string]any)
				st := app["status"].(map[string]any)
				if m["agent"] != "eu" || m["cluster"] != "in-cluster" || fmt.Sprint(st["health"]) == "" ||
					fmt.Sprint(app["metadata"].(map[string]any)["name"]) != m["name"] {
					t.Errorf("application %v", m)
				}
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Errorf("applications %v, want %v", names, tc.want)
			}
			if got := hardRefreshes(s, "web-dev") - before; tc.hard != (got > 0) {
				t.Errorf("Argo CD refreshes of web-dev: %d (hard refresh asked: %v)", got, tc.hard)
			}
		})
	}
	r := s.wait(s.start(pipeline(detailsStep("{applicationsList: [{applicationName: web-prod, agentId: eu}, {applicationName: ghost, agentId: eu}]}"), false), nil).ID, 60*time.Second)
	st := step(r, "dev", "details")
	if r.Status != pipelines.StFailed || !strings.Contains(st.Error, "not found: ghost (agent eu)") ||
		!strings.Contains(st.Error, "web-prod: label harness.io/envRef=prod, the stage's environment is dev") {
		t.Fatalf("none of the stage: %s %q", r.Status, st.Error)
	}
}

// With the agent offline the step parks (holding no worker) and finishes once the agent is
// back; an outage longer than agentOutageTimeout fails the stage without rollback.
func TestGetAppDetailsParksWhileTheAgentIsBlind(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{noAgent: true})
	s.addApp(app("web-dev", "apps/web", map[string]string{"harness.io/serviceRef": "web", "harness.io/envRef": "dev"}))
	run := s.start(pipeline(detailsStep("{applicationsList: [{applicationName: web-dev, agentId: eu}]}"), false)+withRollback, nil)
	s.waitStep(run.ID, "dev", "details", "parked on the offline agent", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && strings.Contains(st.Wait.Reason, "waiting: agent eu cannot see Argo CD")
	})
	s.startAgent("r1")
	r := s.wait(run.ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
	r = s.wait(s.start(pipeline(detailsStep("{applicationName: nothing-here, agentId: offline-agent, agentOutageTimeout: 2s}"), false)+withRollback, nil).ID, 60*time.Second)
	failedBlind(t, r, "details") // the long outage
}

// A record the agent marked stale (Argo CD refuses its token) is not read as the app's state.
func TestGetAppDetailsStaleRecordParks(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOpts{})
	s.addApp(app("web-dev", "apps/web", map[string]string{"harness.io/serviceRef": "web", "harness.io/envRef": "dev"}))
	s.waitRecord("web-dev")
	s.argo.RevokeToken(s.argo.Token())
	run := s.start(pipeline(detailsStep("{applicationName: web-dev}"), false), nil)
	s.waitStep(run.ID, "dev", "details", "parked on the stale view", func(st *pipelines.StepRun) bool {
		return st.Status == pipelines.StWaiting && strings.Contains(st.Wait.Reason, "cannot see Argo CD")
	})
	if err := s.argo.SetHealth("web-dev", argocdtest.HealthHealthy, ""); err != nil {
		t.Fatal(err)
	}
	s.argo.RestoreToken(s.argo.Token())
	r := s.wait(run.ID, 60*time.Second)
	if r.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", r.Status, r.Error, describeRun(r))
	}
}

// hardRefreshes counts the hard-refresh reads of app that reached Argo CD.
func hardRefreshes(s *stack, app string) int {
	n := 0
	for _, r := range s.argo.Requests() {
		if r.Method == "GET" && strings.HasSuffix(r.Path, "/applications/"+app) && strings.Contains(r.Query, "refresh=hard") {
			n++
		}
	}
	return n
}
