package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

// TestRealPreviewNoopTypoFailsBeforeMerge: a promotion that sets a mistyped key (image.tga,
// created because the step says create: true) changes nothing the real Argo CD would deploy:
// the ApplicationSet generates the same app spec and the manifests render the same. The
// stage's DiffPreview (a promotion stage's default) fails before the merge, naming the key;
// main keeps its config and no merge commit is made. A correct key (image.tag) in the same
// setup previews the change and promotes.
func TestRealPreviewNoopTypoFailsBeforeMerge(t *testing.T) {
	r := realSetupAgent(t, "dev")
	before := r.file("envs/dev/config.json")
	headBefore := r.git(t.TempDir(), "ls-remote", r.url, "refs/heads/main")

	typo := strings.Replace(r.promotion([]string{"dev"}, []string{"dev"}, "  create: true\n"), "image.tag:", "image.tga:", 1)
	run := r.e.Wait(r.e.Start(typo, map[string]any{"tag": "9.9.9"}).ID, 5*time.Minute)
	if run.Status != pipelines.StFailed {
		t.Fatalf("typo run %s, want failed:\n%s", run.Status, describeRun(run))
	}
	pv := ctltest.Step(run, "dev", "preview")
	if pv == nil || pv.Status != pipelines.StFailed || !strings.Contains(pv.Error, "changes no resource") || !strings.Contains(pv.Error, "image.tga") {
		t.Fatalf("preview step: %+v", pv)
	}
	if m := ctltest.Step(run, "dev", "merge"); m != nil && m.Status == pipelines.StSucceeded {
		t.Fatalf("the no-op PR was merged: %+v", m.Outputs)
	}
	if got := r.file("envs/dev/config.json"); got != before {
		t.Errorf("main's dev config changed:\n%s", got)
	}
	if head := r.git(t.TempDir(), "ls-remote", r.url, "refs/heads/main"); head != headBefore {
		t.Errorf("main moved from %s to %s: a no-op was merged", headBefore, head)
	}

	good := r.e.Wait(r.e.Start(r.promotion([]string{"dev"}, []string{"dev"}, ""), map[string]any{"tag": "1.5.0"}).ID, 5*time.Minute)
	if good.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s\n%s", good.Status, good.Error, describeRun(good))
	}
	sum, _ := ctltest.Step(good, "dev", "preview").Outputs["summary"].(string)
	if !strings.Contains(sum, r.id+"-dev") || !strings.Contains(sum, "image") {
		t.Errorf("preview summary of the real change: %q", sum)
	}
	t.Logf("REALTIME preview of the real change: %q", sum)
	r.deployed("dev", "1.5.0")
}
