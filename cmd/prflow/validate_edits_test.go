package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `prflow validate` refuses what an UpdateReleaseRepo run would refuse — a file it cannot
// edit, a path leaving the repo, a key path that does not parse — at the field's line and
// column, and accepts what the run accepts (expressions, the quoted key forms).
func TestValidateRefusesWhatTheRunRefuses(t *testing.T) {
	head := "name: x\nstages:\n  - id: s\n    steps:\n      - id: up\n        type: UpdateReleaseRepo\n        with:\n          connector: release\n          repo: acme/release\n"
	for _, tc := range []struct {
		name, with, want string
	}{
		{"txt file", "          filePath: envs/dev/values.txt\n          variables: [{name: image.tag, value: x}]\n",
			`:10:21: stages[0].steps[0].with.filePath: unsupported file format: "envs/dev/values.txt" has extension ".txt"; want .json, .yaml or .yml`},
		{"txt after an expression", "          filePath: \"envs/<+env.name>/values.txt\"\n          variables: [{name: image.tag, value: x}]\n",
			`:10:21: stages[0].steps[0].with.filePath: "envs/<+env.name>/values.txt": unsupported file format`},
		{"no extension", "          filePaths: [envs/dev/values.yaml, envs/dev/values]\n          variables: [{name: image.tag, value: x}]\n",
			`:10:45: stages[0].steps[0].with.filePaths[1]: unsupported file format: "envs/dev/values" has no extension`},
		{"leaves the repo", "          filePath: ../other/values.yaml\n          variables: [{name: image.tag, value: x}]\n",
			`:10:21: stages[0].steps[0].with.filePath: file path "../other/values.yaml" leaves the repository`},
		{"bad key", "          filePath: envs/dev/values.yaml\n          variables:\n            - {name: image.tag, value: x}\n            - {name: \"annotations[\\\"a.b\", value: x}\n",
			`:13:22: stages[0].steps[0].with.variables[1].name: "annotations[\"a.b": unterminated quoted key at offset 12`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "p.yaml")
			if err := os.WriteFile(f, []byte(head+tc.with), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := run(t, "validate", f)
			if err == nil || !strings.Contains(out, f+tc.want) {
				t.Errorf("validate: %v\n%s\nwant %s%s", err, out, f, tc.want)
			}
		})
	}
	for _, ok := range []string{
		"          filePath: \"envs/<+env.name>/values.yaml\"\n          variables: [{name: 'metadata.annotations[\"argocd.argoproj.io/sync-wave\"]', value: x}]\n",
		"          filePath: \"${{ inputs.file }}\"\n          variables: [{name: image.tag, value: x}]\n",
		"          filePath: \"envs/<+env.name>/<+cluster.name>\"\n          variables: [{name: image.tag, value: x}]\n",
	} {
		f := filepath.Join(t.TempDir(), "p.yaml")
		src := strings.Replace(head, "name: x\n", "name: x\ninputs: {file: {type: string, default: a.yaml}}\n", 1) + ok
		if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := run(t, "validate", f); err != nil {
			t.Errorf("validate refused %q: %v\n%s", ok, err, out)
		}
	}
}
