package pipelines

import (
	"bytes"
	"io/fs"
	"path"
	"strings"
	"testing"

	"github.com/prflow/prflow/examples"
	"github.com/prflow/prflow/steps"
)

// The checked-in schema is what the generator makes of the step types' declarations.
func TestSchemaIsGenerated(t *testing.T) {
	got, err := GenerateSchema(steps.Default)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, Schema) {
		t.Fatalf("pipelines/schema.json is stale (step inputs or schema_base.json changed): regenerate it with %s", SchemaCommand)
	}
}

// Every example names the schema on its first line, by a path that reaches it.
func TestExamplesNameTheSchema(t *testing.T) {
	n := 0
	err := fs.WalkDir(examples.FS, "pipelines", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		n++
		src, _ := examples.FS.ReadFile(p)
		first, _, _ := strings.Cut(string(src), "\n")
		ref, ok := strings.CutPrefix(first, "# yaml-language-server: $schema=")
		if !ok {
			t.Errorf("examples/%s: first line %q is not # yaml-language-server: $schema=…", p, first)
			return nil
		}
		// examples/<p> → the repo root is two levels above the file's directory.
		if got := path.Clean(path.Join("examples", path.Dir(p), ref)); got != "pipelines/schema.json" {
			t.Errorf("examples/%s: $schema=%s points at %s, want pipelines/schema.json", p, ref, got)
		}
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("no examples (%v)", err)
	}
}

// The schema refuses what the loader refuses in with: (typo'd keys, wrong literal types,
// enum values, missing required inputs, internal step types) and accepts what it accepts.
func TestSchemaChecksStepInputs(t *testing.T) {
	validate := schemaValidator(t)
	const fetch = "      - {id: apps, type: FetchLinkedApps}\n"
	for _, bad := range []string{
		fetch + "      - {id: sync, type: GitOpsSync, with: {waitTilHealthy: true}}\n",
		"      - {id: m, type: MergePR, with: {mergeStrategey: squash}}\n",
		"      - {id: m, type: MergePR, with: {mergeStrategy: squish}}\n",
		"      - {id: m, type: GitOpsUpdateReleaseRepo, with: {connector: c, repo: r, filePath: f, prTitel: x}}\n",
		fetch + "      - {id: sync, type: GitOpsSync, with: {waitTillHealthy: yes please}}\n",
		"      - {id: m, type: MergePR, with: {prNumber: 1.5}}\n",
		"      - {id: w, type: Wait, with: {duration: a while}}\n",
		"      - {id: w, type: Wait}\n",
		"      - {id: u, type: UpdateReleaseRepo, with: {repo: r, filePath: f.yaml}}\n",
		fetch + "      - {id: sync, type: GitOpsSync, with: {syncOptions: {autoCreateNamespce: true}}}\n",
		"      - {id: u, type: UpdateReleaseRepo, with: {connector: c, repo: r, filePath: f, variables: [{nmae: a, value: b}]}}\n",
		"      - {id: c, type: CommitStatus, with: {state: success}}\n",
		"      - {id: g, type: StageGate, with: {soak: 1m}}\n",
		"      - {id: g, type: GitOpsSnyc}\n",
	} {
		src := []byte(stepSrc(bad))
		if validate(src) == nil {
			t.Errorf("schema accepted:\n%s", bad)
		}
		if _, err := Load("p.yaml", src, steps.Default); err == nil {
			t.Errorf("loader accepted:\n%s", bad)
		}
	}
	for _, good := range []string{
		fetch + "      - {id: sync, type: GitOpsSync, with: {waitTillHealthy: \"${{ inputs.x == 'y' }}\", prune: \"true\", degradedStateTimeout: 0, applicationLabels: {team: a}}}\n",
		"      - {id: apps, type: FetchLinkedApps, with: {labels: [\"team:a\"], appWaitTimeout: 30s}}\n      - {id: sync, type: GitOpsSync, with: {syncOptions: [CreateNamespace=true], retryStrategy: {limit: 2}}}\n",
		"      - {id: a, type: Approval, with: {approvers: [ann, \"group:ops\"], minimumCount: \"<+pipeline.variables.n>\"}}\n",
		"      - {id: a, type: HarnessApproval, with: {approvers: {users: ann, groups: [ops], minimumCount: 1}}}\n",
		"      - {id: u, type: UpdateReleaseRepo, with: {connector: c, repo: r, filePath: f.yaml, prTitle: 1.10, variables: [{name: a, type: String, value: 1.10}, {name: b, type: Raw, value: {k: [1]}}]}}\n      - {id: m, type: MergePR, with: {prNumber: 3, mergeStrategy: squash}}\n",
		"      - {id: n, type: Noop, with: {outputs: {any: {thing: [1]}}, message: hi}}\n      - {id: w, type: Wait, with: {duration: 1h30m}}\n",
	} {
		src := []byte(stepSrc(good))
		if err := validate(src); err != nil {
			t.Errorf("schema refused:\n%s\n%v", good, err)
		}
		if _, err := Load("p.yaml", src, steps.Default); err != nil {
			t.Errorf("loader refused:\n%s\n%v", good, err)
		}
	}
}
