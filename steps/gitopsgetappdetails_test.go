package steps

import (
	"strings"
	"testing"

	"github.com/prflow/prflow/deploy/agent"
)

func TestGetAppDetailsInputs(t *testing.T) {
	for _, c := range []struct {
		name   string
		in     map[string]any
		static bool
		err    string
	}{
		{"list", map[string]any{"applicationsList": []any{map[string]any{"agentId": "eu", "applicationName": "web"}}}, false, ""},
		{"name and agent", map[string]any{"applicationName": "web", "agentId": "eu", "hardRefresh": "true"}, false, ""},
		{"regex", map[string]any{"applicationRegex": "^web-"}, false, ""},
		{"regex from an expression, at load", map[string]any{"applicationRegex": "<+matrix.applications>", "hardRefresh": "<+inputs.hard>"}, true, ""},
		{"nothing", map[string]any{"hardRefresh": false}, false, "no apps to read: give applicationsList, applicationRegex, or applicationName"},
		{"two", map[string]any{"applicationRegex": "x", "applicationName": "web"}, false, "give only one"},
		{"bad regex", map[string]any{"applicationRegex": "web-("}, false, "applicationRegex: error parsing regexp"},
		{"regex not a string", map[string]any{"applicationRegex": 7}, false, "applicationRegex: want a string"},
		{"entry without name", map[string]any{"applicationsList": []any{map[string]any{"agentId": "eu"}}}, false, "applicationsList[0].applicationName: required"},
		{"bad bool", map[string]any{"applicationName": "web", "hardRefresh": "soon"}, false, "hardRefresh: want true or false"},
		{"bad outage timeout", map[string]any{"applicationName": "web", "agentOutageTimeout": "long"}, false, "agentOutageTimeout"},
	} {
		_, err := appDetailsConfigFrom(c.in, c.static)
		if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.err)
		}
	}
}

func TestAppOutsideStage(t *testing.T) {
	env := &Environment{Name: "dev", Service: "web", Clusters: []Cluster{{Name: "dev-eu", Agent: "eu"}, {Name: "dev-us", Agent: "us"}}}
	for _, c := range []struct {
		name  string
		env   *Environment
		agent string
		st    agent.AppStatus
		why   string
	}{
		{"matches", env, "eu", agent.AppStatus{Cluster: "dev-eu", Labels: map[string]string{LabelServiceRef: "web", LabelEnvRef: "dev"}}, ""},
		{"unlabelled app on the cluster", env, "eu", agent.AppStatus{Cluster: "dev-eu"}, ""},
		{"by server URL", &Environment{Name: "dev", Clusters: []Cluster{{Name: "https://k8s.eu", Agent: "eu"}}}, "eu", agent.AppStatus{Cluster: "x", ClusterServer: "https://k8s.eu"}, ""},
		{"other agent's cluster", env, "eu", agent.AppStatus{Cluster: "dev-us"}, `runs on cluster "dev-us", not on the stage's clusters of agent eu (dev-eu)`},
		{"other service", env, "eu", agent.AppStatus{Cluster: "dev-eu", Labels: map[string]string{LabelServiceRef: "api"}}, "label harness.io/serviceRef=api, the stage's service is web"},
		{"other environment", env, "us", agent.AppStatus{Cluster: "dev-us", Labels: map[string]string{LabelEnvRef: "prod"}}, "label harness.io/envRef=prod, the stage's environment is dev"},
		{"no environment", nil, "eu", agent.AppStatus{Cluster: "anything"}, ""},
	} {
		got := appOutsideStage(&Context{Env: c.env}, c.agent, &c.st)
		if (c.why == "") != (got == "") || !strings.Contains(got, c.why) {
			t.Errorf("%s: %q, want %q", c.name, got, c.why)
		}
	}
}

func TestAppDetailsOutput(t *testing.T) {
	o := appDetails("eu", &agent.AppStatus{Name: "web", AppNamespace: "team-a", Project: "shop", Namespace: "web", Cluster: "dev-eu",
		Source: agent.Source{RepoURL: "https://git/r", Path: "envs/dev", TargetRevision: "main"}, Sync: "Synced", Revision: "abc",
		Health: "Degraded", HealthMessage: "crash loop", Operation: &agent.Operation{Phase: "Succeeded", SyncedRevision: "abc"}})
	for k, want := range map[string]any{"name": "web", "agent": "eu", "agentIdentifier": "eu", "cluster": "dev-eu", "health": "Degraded",
		"healthStatus": "Degraded", "project": "shop", "targetRevision": "main"} {
		if o[k] != want {
			t.Errorf("%s = %v, want %v", k, o[k], want)
		}
	}
	app := o["app"].(map[string]any)
	st := app["status"].(map[string]any)
	if st["health"].(map[string]any)["message"] != "crash loop" || st["sync"].(map[string]any)["revision"] != "abc" ||
		st["operationState"].(map[string]any)["phase"] != "Succeeded" || app["metadata"].(map[string]any)["namespace"] != "team-a" ||
		app["spec"].(map[string]any)["destination"].(map[string]any)["name"] != "dev-eu" {
		t.Errorf("app: %v", app)
	}
}
