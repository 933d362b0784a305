package steps_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/steps"
)

// oldSecret is a credential someone committed to the release repo; the worker knows it as a
// secret, so the old value the step records must be masked like any output.
const oldSecret = "hunter2-committed-token"

// UpdateReleaseRepo's edits output records, per change, the value it replaced (old) or that
// it created the key: through a real run on the fake GitHub, for YAML (quoted key, list
// item, a key created in a map with a merge key), JSON, one document of a multi-document file, a key and a file created
// with create: true, and a replaced value that is a secret.
func TestUpdateReleaseRepoRecordsOldValues(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"envs/dev/values.yaml":  valuesYAML + "defaults: &d\n  timeout: 30\nworker:\n  <<: *d\napiKey: " + oldSecret + "\nannotations:\n  argocd.argoproj.io/sync-wave: \"1\"\n",
		"envs/prod/config.json": "{\n  \"replicas\": 2,\n  \"image\": {\"tag\": \"1.4.1\"}\n}\n",
		"envs/dev/app.yaml":     manifestsYAML,
	}
	fg := githubRepo(t, "release", files)
	p := fg.p
	e := ctltest.New(t, ctltest.Options{Workers: 1, Concurrency: 4, Secrets: []string{oldSecret},
		Services: map[string]any{steps.ServiceSCM: connector.Static{"release": p}},
		Tuning:   queue.ConsumerTuning{AckWait: 5 * time.Second, MaxDeliver: 5}})
	const pipe = `
name: oldvalues
stages:
  - id: yaml
    steps:
      - id: u
        type: UpdateReleaseRepo
        with:
          connector: release
          repo: acme/release
          filePath: envs/dev/values.yaml
          variables:
            - {name: image.tag, type: String, value: "1.5.0"}
            - {name: replicaCount, type: Number, value: "3"}
            - {name: "env[1].value", type: String, value: "true"}
            - {name: 'annotations["argocd.argoproj.io/sync-wave"]', type: String, value: "5"}
            - {name: worker.retries, type: Number, value: "2", create: true}
            - {name: apiKey, type: String, value: rotated-elsewhere}
  - id: json
    steps:
      - id: u
        type: UpdateReleaseRepo
        with: {connector: release, repo: acme/release, filePath: envs/prod/config.json, variables: [{name: image.tag, type: String, value: "1.5.0"}, {name: replicas, type: Number, value: "4"}]}
  - id: multidoc
    steps:
      - id: u
        type: UpdateReleaseRepo
        with: {connector: release, repo: acme/release, filePath: envs/dev/app.yaml, document: {kind: Deployment, name: web}, variables: [{name: spec.replicas, type: Number, value: "3"}]}
  - id: newfile
    steps:
      - id: u
        type: UpdateReleaseRepo
        with: {connector: release, repo: acme/release, filePath: envs/qa/values.yaml, create: true, variables: [{name: image.tag, type: String, value: "1.5.0"}]}
`
	r := e.Wait(e.Start(pipe, nil).ID, 90*time.Second)
	if r.Status != pipelines.StSucceeded {
		for _, s := range r.Stages {
			for _, st := range s.Steps {
				t.Logf("%s.%s %s: %s", s.ID, st.ID, st.Status, st.Error)
			}
		}
		t.Fatalf("run %s", r.Status)
	}
	type kv struct {
		key          string
		old          any
		hasOld, crea bool
	}
	for _, tc := range []struct {
		stage string
		want  []kv
	}{
		{"yaml", []kv{
			{"image.tag", "1.4.1", true, false},
			{"replicaCount", float64(2), true, false}, // a number, as JSON carries it through KV
			{"env[1].value", "false", true, false},
			{`annotations["argocd.argoproj.io/sync-wave"]`, "1", true, false},
			{"worker.retries", nil, false, true},
			{"apiKey", "***", true, false},
		}},
		{"json", []kv{{"image.tag", "1.4.1", true, false}, {"replicas", float64(2), true, false}}},
		{"multidoc", []kv{{"spec.replicas", float64(1), true, false}}}, // the Deployment's, not the Job's backoffLimit
		{"newfile", []kv{{"image.tag", nil, false, true}}},
	} {
		st := ctltest.Step(r, tc.stage, "u")
		var got []kv
		for _, k := range steps.EditedKeys(st.Outputs["edits"]) {
			got = append(got, kv{k.Key, k.Old, k.HasOld, k.Created})
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: edits old values = %#v\nwant %#v\n(edits output %v)", tc.stage, got, tc.want, st.Outputs["edits"])
		}
	}
	// The secret is in no stored output, masked or not as a map value.
	raw, _ := json.Marshal(r)
	if strings.Contains(string(raw), oldSecret) {
		t.Errorf("the run record holds the secret old value: %s", raw)
	}
}
