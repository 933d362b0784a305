package controller

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
)

const catalogServerPipeline = `
name: release
description: Promote a tag through dev and prod
inputs:
  tag: {type: string, required: true, description: image tag to promote}
  replicas: {type: number, default: 2}
  canary: {type: boolean, default: false}
  region: {type: string, default: eu, allowed: [eu, us]}
environments:
  - {name: dev}
  - {name: prod}
triggers:
  - name: release
    push: {branches: ["release/*"]}
    inputs: {tag: "${{ event.after }}"}
stages:
  - id: dev
    environment: dev
    steps: [{id: s, type: Noop}]
  - id: prod
    environment: prod
    steps: [{id: s, type: Noop}]
`

// TestPipelineCatalogAndStartByName: GET /api/v1/pipelines lists the server's pipelines and the
// newest source of each other pipeline runs show, with typed inputs; POST
// /api/v1/pipelines/{name}/runs starts one by name with inputs checked as POST /api/v1/runs
// checks them (types converted, required, enums, unknown inputs), the Idempotency-Key honoured.
func TestPipelineCatalogAndStartByName(t *testing.T) {
	t.Parallel()
	a := newAuditAPI(t)
	ts, err := NewTriggerSet(a.e.reg, map[string][]byte{"release.yaml": []byte(catalogServerPipeline)})
	if err != nil {
		t.Fatal(err)
	}
	a.e.ctl.SetTriggers(ts)
	// Two runs of an ad-hoc pipeline: the newest source is the one listed.
	old := "name: adhoc\ninputs: {who: {type: string, default: old}}\nstages: [{id: s, steps: [{id: a, type: Noop}]}]\n"
	newer := "name: adhoc\ninputs: {who: {type: string, default: new}}\nstages: [{id: s, steps: [{id: a, type: Noop}]}]\n"
	a.e.wait(a.e.startRun(old, nil).ID, time.Minute)
	time.Sleep(10 * time.Millisecond) // creation times differ
	last := a.e.wait(a.e.startRun(newer, nil).ID, time.Minute)

	code, body := a.call(auditToken, "GET", "/api/v1/pipelines", nil)
	if code != http.StatusOK {
		t.Fatalf("catalog: %d %s", code, body)
	}
	var list []PipelineInfo
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "adhoc" || list[1].Name != "release" {
		t.Fatalf("catalog %s", body)
	}
	if list[0].From != "run "+last.ID || list[0].Inputs[0].Default != "new" {
		t.Fatalf("adhoc comes from %q with default %v, want the newest run's source", list[0].From, list[0].Inputs[0].Default)
	}
	rel := list[1]
	if rel.From != "server" || rel.Description != "Promote a tag through dev and prod" || strings.Join(rel.Environments, ",") != "dev,prod" || len(rel.Inputs) != 4 {
		t.Fatalf("release: %+v", rel)
	}
	byName := map[string]InputInfo{}
	for _, in := range rel.Inputs {
		byName[in.Name] = in
	}
	if in := byName["tag"]; !in.Required || in.Type != "string" || in.Description != "image tag to promote" {
		t.Fatalf("tag: %+v", in)
	}
	if in := byName["region"]; len(in.Enum) != 2 || in.Default != "eu" {
		t.Fatalf("region: %+v", in)
	}
	if in := byName["replicas"]; in.Type != "number" {
		t.Fatalf("replicas: %+v", in)
	}

	for _, tc := range []struct {
		name, path string
		inputs     map[string]any
		code       int
		want       string
	}{
		{"unknown pipeline", "/api/v1/pipelines/nope/runs", nil, 404, `unknown pipeline \"nope\" (known: adhoc, release)`},
		{"missing required", "/api/v1/pipelines/release/runs", map[string]any{}, 422, `input \"tag\" is required`},
		{"wrong type", "/api/v1/pipelines/release/runs", map[string]any{"tag": "1", "replicas": "three"}, 422, `input \"replicas\": want a number, got \"three\"`},
		{"not in the enum", "/api/v1/pipelines/release/runs", map[string]any{"tag": "1", "region": "mars"}, 422, `input \"region\": \"mars\" is not one of [eu us]`},
		{"unknown input", "/api/v1/pipelines/release/runs", map[string]any{"tag": "1", "tga": "x"}, 422, `unknown input \"tga\"`},
		{"hostile name", "/api/v1/pipelines/..%2F..%2Fetc/runs", map[string]any{"tag": "1"}, 404, "unknown pipeline"},
	} {
		code, body := a.call(auditToken, "POST", tc.path, map[string]any{"inputs": tc.inputs})
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d %s", tc.name, code, body, tc.code, tc.want)
		}
	}
	before := countRuns(t, a.e.ctl)
	if before != 2 {
		t.Fatalf("refused starts stored runs: %d", before)
	}

	req, _ := http.NewRequest("POST", a.srv.URL+"/api/v1/pipelines/release/runs", strings.NewReader(`{"inputs": {"tag": "1.4.2", "replicas": "3", "canary": "true"}}`))
	req.Header.Set("Authorization", "Bearer "+auditToken)
	req.Header.Set(IdempotencyHeader, "promote-form-1")
	var ids []string
	for i := range 2 {
		resp, err := http.DefaultClient.Do(req.Clone(req.Context()))
		if err != nil {
			t.Fatal(err)
		}
		b := readAll(resp)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || (resp.Header.Get(ReplayedHeader) == "true") != (i == 1) {
			t.Fatalf("start by name %d: %d replayed %q %s", i, resp.StatusCode, resp.Header.Get(ReplayedHeader), b)
		}
		req.Body = nil
		req, _ = http.NewRequest("POST", a.srv.URL+"/api/v1/pipelines/release/runs", strings.NewReader(`{"inputs": {"tag": "1.4.2", "replicas": "3", "canary": "true"}}`))
		req.Header.Set("Authorization", "Bearer "+auditToken)
		req.Header.Set(IdempotencyHeader, "promote-form-1")
		r := decodeRun(t, b)
		ids = append(ids, r.ID)
		if r.Pipeline != "release" || r.Inputs["tag"] != "1.4.2" || r.Inputs["replicas"] != float64(3) || r.Inputs["canary"] != true || r.Inputs["region"] != "eu" || r.Executor != "alice" {
			t.Fatalf("run by name: %s inputs %#v executor %s", r.Pipeline, r.Inputs, r.Executor)
		}
	}
	if ids[0] != ids[1] {
		t.Fatalf("one Idempotency-Key started two runs: %v", ids)
	}
	done := a.e.wait(ids[0], time.Minute)
	if done.Status != pipelines.StSucceeded || !strings.HasSuffix(done.File, "release.yaml") {
		t.Fatalf("run by name %s (file %s)", done.Status, done.File)
	}
	if got := countRuns(t, a.e.ctl); got != 3 {
		t.Fatalf("%d runs, want 3", got)
	}
}

// TestCatalogListsEveryServerPipeline: the catalog offers every pipeline of the server's
// --pipelines directory, also those without triggers (which webhooks never start), and a
// directory file that does not load is an error naming it.
func TestCatalogListsEveryServerPipeline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{workers: 1})
	dir := t.TempDir()
	files := map[string]string{
		"release.yaml": catalogServerPipeline,
		"manual.yml":   "name: manual\ninputs: {env: {type: string, allowed: [dev, prod], required: true}}\nstages: [{id: s, steps: [{id: a, type: Noop}]}]\n",
		"notes.txt":    "not a pipeline",
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := LoadTriggerDir(dir, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts.Pipelines) != 1 || ts.Pipelines[0].Name != "release" {
		t.Fatalf("webhook pipelines: %d", len(ts.Pipelines))
	}
	e.ctl.SetTriggers(ts)
	list, err := e.ctl.Catalog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "manual" || list[0].From != "server" || list[1].Name != "release" {
		t.Fatalf("catalog %+v", list)
	}
	r, err := e.ctl.StartPipeline(context.Background(), "manual", StartRequest{Inputs: map[string]any{"env": "prod"}, Executor: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	if done := e.wait(r.ID, time.Minute); done.Status != pipelines.StSucceeded {
		t.Fatalf("manual run %s", done.Status)
	}
	if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("name: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTriggerDir(dir, e.reg); err == nil || !strings.Contains(err.Error(), "broken.yaml") {
		t.Fatalf("a broken file in the directory: %v", err)
	}
}
