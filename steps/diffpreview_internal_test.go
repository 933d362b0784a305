package steps

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prflow/prflow/deploy/agent"
)

func TestPreviewInputs(t *testing.T) {
	for _, tc := range []struct {
		in  map[string]any
		err string
	}{
		{map[string]any{}, ""},
		{map[string]any{"allowNoop": true, "comment": "false", "maxCommentBytes": 4000, "maxDiffBytes": "${{ inputs.max }}"}, ""},
		{map[string]any{"allowNoop": "maybe"}, "allowNoop: want true or false"},
		{map[string]any{"comment": 3}, "comment: want true or false"},
		{map[string]any{"maxCommentBytes": 10}, "maxCommentBytes: 10 is too small"},
		{map[string]any{"maxDiffBytes": "lots"}, "maxDiffBytes: want a whole number"},
		{map[string]any{"runUrl": []any{"x"}}, "runUrl: want a string"},
	} {
		_, err := previewConfigFrom(tc.in, true)
		if (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: err %v, want %q", tc.in, err, tc.err)
		}
	}
	// Through the registry, as pipeline load checks it.
	def, _ := Default.Lookup(TypeDiffPreview)
	if err := def.Validate(map[string]any{"selector": "tier in (web"}); err == nil || !strings.Contains(err.Error(), "selector") {
		t.Errorf("bad selector: %v", err)
	}
}

// Without a PR to preview the step says what to give; a stage whose update opened no PR
// (already promoted) has nothing to preview and says so, changing nothing.
func TestPreviewTarget(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sc := &Context{Stage: "dev", Log: log, Inputs: map[string]any{}}
	if _, _, err := previewTargetOf(context.Background(), sc); err == nil || !IsTerminal(err) || !strings.Contains(err.Error(), "no PR to preview") {
		t.Fatalf("no PR: %v", err)
	}
	sc.Inputs = map[string]any{"prNumber": "twelve"}
	if _, _, err := previewTargetOf(context.Background(), sc); err == nil || !strings.Contains(err.Error(), "prNumber: want a whole number") {
		t.Fatalf("bad prNumber: %v", err)
	}
	sc.Inputs = map[string]any{}
	sc.Priors = []Prior{{ID: "update", Type: "UpdateReleaseRepo", Outputs: map[string]any{"alreadyPromoted": true, "prNumber": ""}}}
	_, skip, err := previewTargetOf(context.Background(), sc)
	if err != nil || skip == nil || skip.Status != Succeeded || skip.Outputs["changed"] != false || skip.Outputs["summary"] != "already promoted: no PR to preview" {
		t.Fatalf("already promoted: %+v %v", skip, err)
	}
}

func TestPreviewSummaryLines(t *testing.T) {
	cm := agent.ResourceDiff{Kind: "ConfigMap", Namespace: "web-prod", Name: "web", Change: agent.ChangeChanged, Paths: []string{"data.image"}}
	for _, tc := range []struct {
		d    agent.AppDiff
		want string
	}{
		{agent.AppDiff{App: "web-prod", Resources: []agent.ResourceDiff{cm}}, "web-prod: 1 changed (ConfigMap web-prod/web: data.image)"},
		{agent.AppDiff{App: "web-dev", Unchanged: 3}, "web-dev: no change"},
		{agent.AppDiff{App: "web-qa", Created: true, Resources: []agent.ResourceDiff{{Kind: "ConfigMap", Namespace: "web-qa", Name: "web", Change: agent.ChangeAdded},
			{Kind: "Service", Namespace: "web-qa", Name: "web", Change: agent.ChangeAdded}}}, "web-qa: creates app web-qa with 2 resources (ConfigMap web-qa/web; Service web-qa/web)"},
		{agent.AppDiff{App: "web-old", Deleted: true, Resources: []agent.ResourceDiff{{Kind: "ConfigMap", Name: "web", Change: agent.ChangeRemoved}}}, "web-old: deletes app web-old and its 1 resource"},
		{agent.AppDiff{App: "web-prod", Resources: []agent.ResourceDiff{cm, {Kind: "Secret", Namespace: "web-prod", Name: "db", Change: agent.ChangeAdded, Masked: true}}},
			"web-prod: 1 added, 1 changed (ConfigMap web-prod/web: data.image; Secret web-prod/db added)"},
		{agent.AppDiff{App: "web-prod", SpecChanges: []string{`spec.source.helm.parameters[x]: "1" → "2"`}}, `web-prod: its spec changes (spec.source.helm.parameters[x]: "1" → "2"), its resources render the same`},
		{agent.AppDiff{App: "web-prod", SpecChanges: []string{`tlas.image: a → b`}, SpecNotRendered: true}, `web-prod: its spec changes (tlas.image: a → b); its resources under the new spec are not known before it is applied (Argo CD renders only the current spec)`},
		{agent.AppDiff{App: "web-prod", Error: "ComparisonError: boom"}, "web-prod: cannot preview: ComparisonError: boom"},
		// Issue 33 gaps: a value-only Secret change cannot be seen, a new app not rendered, an
		// app whose sources cannot be rendered at the revision.
		{agent.AppDiff{App: "web-prod", Unchanged: 2, SecretsNotCompared: []string{"web-prod/db: password"}},
			"web-prod: no change seen; the values of Secret web-prod/db: password were not compared (Argo CD hides them)"},
		{agent.AppDiff{App: "web-qa", Created: true, SpecNotRendered: true}, "web-qa: creates app web-qa; its resources are not rendered before it exists (the agent renders new apps only with --preview-apps)"},
		{agent.AppDiff{App: "charts", Error: "not previewed: the app's source is Helm chart web 1.2.3 from oci://r"}, "charts: not previewed: the app's source is Helm chart web 1.2.3 from oci://r"},
	} {
		if got := summaryLine(&tc.d); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}

// What the rendered manifests hold is not trusted in the comment: a diff containing a code
// fence cannot close the block it is shown in, and names cannot open HTML in the summary.
func TestPreviewCommentHostileContent(t *testing.T) {
	d := agent.AppDiff{App: "web-prod", Resources: []agent.ResourceDiff{{Kind: "ConfigMap", Namespace: "web-prod", Name: "</summary><script>x</script>",
		Change: agent.ChangeChanged, Paths: []string{"data.readme"}, Diff: "--- a\n+++ b\n-old\n+```\n+</details>\n"}}}
	sc := &Context{RunID: "r1", Stage: "prod", Env: &Environment{Name: "prod"}}
	out := previewOutputs([]agent.AppDiff{d}, previewTarget{head: "0123456789abcdef"})
	body := previewComment(sc, previewTarget{head: "0123456789abcdef"}, []agent.AppDiff{d}, out, "", "", 60000)
	if strings.Contains(body, "<script>") {
		t.Errorf("HTML from a resource name reaches the comment:\n%s", body)
	}
	if !strings.Contains(body, "````diff\n") {
		t.Errorf("the fence is not longer than the diff's own:\n%s", body)
	}
}

// An app error that says Argo CD cannot work (its repo-server is down) is an outage to wait
// out, not a broken change; a comparison error is the change's.
func TestPreviewUnavailableApp(t *testing.T) {
	down := agent.AppDiff{App: "web-prod", Error: "rpc error: code = Unavailable desc = connection error: dial tcp 10.0.0.7:8081: connect: connection refused"}
	broken := agent.AppDiff{App: "web-dev", Error: "ComparisonError: Failed to load target state: web.jsonnet:3: unexpected end of file"}
	if got := unavailableApp([]agent.AppDiff{broken, down}); !strings.HasPrefix(got, "web-prod: rpc error") {
		t.Errorf("unavailable: %q", got)
	}
	if got := unavailableApp([]agent.AppDiff{broken, {App: "web-qa"}}); got != "" {
		t.Errorf("a comparison error taken for an outage: %q", got)
	}
}
