package steps

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prflow/prflow/deploy/agent"
)

func TestFetchLinkedAppsInputs(t *testing.T) {
	cases := []struct {
		in  map[string]any
		err string
	}{
		{map[string]any{}, ""},
		{map[string]any{"applicationSet": "web"}, ""},
		{map[string]any{"labels": map[string]any{"team": "pay"}, "selector": "tier in (web,api)"}, ""},
		{map[string]any{"filterByServiceEnvCluster": "${{ inputs.all }}"}, ""},
		{map[string]any{"selector": "tier in (web"}, "selector: selector"},
		{map[string]any{"selector": 3}, "selector: want a label selector string"},
		{map[string]any{"labels": 7}, "labels: want a list"},
		{map[string]any{"allowEmpty": "maybe"}, "allowEmpty: want true or false"},
		{map[string]any{"appWaitTimeout": "ten"}, "appWaitTimeout: bad duration"},
	}
	for _, c := range cases {
		_, err := linkedConfigFrom(c.in, true)
		if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%v: err = %v, want %q", c.in, err, c.err)
		}
	}
}

func TestFetchLinkedAppsSelection(t *testing.T) {
	env := &Environment{Name: "prod", Service: "web", Clusters: []Cluster{{Name: "prod-eu", Agent: "eu"}, {Name: "prod-us", Agent: "us"}}}
	cases := []struct {
		name    string
		env     *Environment
		in      map[string]any
		query   string // fmt of the query's selector, labels and ApplicationSet
		how     string
		targets string
		err     string
	}{
		{"by service and environment labels (default)", env, map[string]any{},
			"sel= labels=map[harness.io/envRef:prod harness.io/serviceRef:web] set=", "harness.io/serviceRef=web, harness.io/envRef=prod", "eu/prod-eu us/prod-us", ""},
		{"by ApplicationSet", env, map[string]any{"applicationSet": "web-appset"},
			"sel= labels=map[] set=web-appset", "ApplicationSet web-appset", "eu/prod-eu us/prod-us", ""},
		{"by labels and selector", env, map[string]any{"labels": []any{"team:pay"}, "selector": "tier!=db"},
			"sel=team=pay,tier!=db labels=map[] set=", "selector team=pay,tier!=db", "eu/prod-eu us/prod-us", ""},
		{"filterByServiceEnvCluster: every app of the environment", env, map[string]any{"filterByServiceEnvCluster": true, "applicationSet": "ignored"},
			"sel= labels=map[harness.io/envRef:prod] set=", "harness.io/envRef=prod", "eu/prod-eu us/prod-us", ""},
		{"one agent only", env, map[string]any{"agentId": "us", "applicationSet": "x"}, "sel= labels=map[] set=x", "ApplicationSet x", "us/prod-us", ""},
		{"no environment, agent given", nil, map[string]any{"agentId": "eu", "selector": "a=b"}, "sel=a=b labels=map[] set=", "selector a=b", "eu/", ""},
		{"no service to match", &Environment{Name: "dev", Clusters: []Cluster{{Name: "c", Agent: "eu"}}}, map[string]any{}, "", "", "", "no way to select apps"},
		{"cluster without agent", &Environment{Name: "dev", Service: "web", Clusters: []Cluster{{Name: "c"}}}, map[string]any{}, "", "", "", "environment dev, cluster c: no agent"},
		{"nowhere to look", nil, map[string]any{"selector": "a=b"}, "", "", "", "no clusters to look in"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := linkedConfigFrom(c.in, false)
			if err != nil {
				t.Fatal(err)
			}
			sc := &Context{Env: c.env}
			targets, terr := linkedTargets(sc, cfg)
			q, how, qerr := linkedQuery(sc, cfg)
			if c.err != "" {
				got := fmt.Sprint(terr, qerr)
				if !strings.Contains(got, c.err) {
					t.Fatalf("errors %v / %v, want %q", terr, qerr, c.err)
				}
				return
			}
			if terr != nil || qerr != nil {
				t.Fatalf("errors %v / %v", terr, qerr)
			}
			if got := fmt.Sprintf("sel=%s labels=%v set=%s", q.Selector, nonNil(q.Labels), q.ApplicationSet); got != c.query {
				t.Errorf("query %s, want %s", got, c.query)
			}
			if how != c.how {
				t.Errorf("described as %q, want %q", how, c.how)
			}
			var ts []string
			for _, tg := range targets {
				ts = append(ts, tg.agent+"/"+tg.cluster)
			}
			if strings.Join(ts, " ") != c.targets {
				t.Errorf("targets %v, want %s", ts, c.targets)
			}
		})
	}
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func TestLinkedOutputAndSyncTargets(t *testing.T) {
	o := linkedOutput("eu", agent.AppStatus{Name: "web", AppNamespace: "team-a", Cluster: "prod-eu", Namespace: "web",
		URL: "https://argo/applications/team-a/web", Sync: "Synced", Health: "Healthy", Revision: "abc", ApplicationSet: "web"})
	for k, want := range map[string]any{"name": "web", "agent": "eu", "cluster": "prod-eu", "namespace": "web", "url": "https://argo/applications/team-a/web",
		"sync": "Synced", "health": "Healthy", "revision": "abc", "applicationSet": "web", "appNamespace": "team-a", "agentIdentifier": "eu"} {
		if o[k] != want {
			t.Errorf("output %s = %v, want %v", k, o[k], want)
		}
	}
	// GitOpsSync reads the stage's latest FetchLinkedApps output, namespaced apps included.
	sc := &Context{Priors: []Prior{{Type: "FetchLinkedApps", Outputs: map[string]any{"apps": []any{o, map[string]any{"name": "api", "agent": "us"}}}}}}
	got := fmt.Sprint(linkedApps(sc))
	if got != "[{eu team-a/web} {us api}]" {
		t.Fatalf("linked apps as sync targets: %s", got)
	}
}
