package steps_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/steps"
)

// TestReadReleaseValuesStep runs the worker side of an environment's read against the GitHub
// fake: values found, a key the file lacks, a file gone, a file that is not YAML, a
// comparison, a forge error (transient, for the worker to retry), a 403 (terminal), and
// mistaken or hostile inputs refused before any call.
func TestReadReleaseValuesStep(t *testing.T) {
	fg := githubRepo(t, "release", map[string]string{
		"envs/dev/config.json": `{"image": {"tag": "1.6.0"}}`, "envs/qa/values.yaml": "image:\n  tag: \"2.0\"\n", "envs/old/config.json": "{}",
	})
	gh, p := fg.f, fg.p
	ctx := context.Background()
	base, err := p.Branch(ctx, "acme/release", "main")
	if err != nil {
		t.Fatal(err)
	}
	sha, err := p.Commit(ctx, "acme/release", scm.CommitInput{Branch: "main", Parent: base.SHA, Message: "hand edit", Changes: []scm.FileChange{
		{Path: "envs/dev/config.json", Content: []byte(`{"image": {"tag": "1.7.0"}}`)}, {Path: "envs/old/config.json", Delete: true},
		{Path: "envs/qa/values.yaml", Content: []byte("image: [unclosed\n")}}})
	if err != nil {
		t.Fatal(err)
	}
	def, ok := steps.Default.Lookup(steps.TypeReadReleaseValues)
	if !ok || !def.Internal {
		t.Fatal("ReadReleaseValues is not registered as an internal step")
	}
	run := func(in map[string]any) (steps.Result, error) {
		sc := &steps.Context{RunID: "_envread-x", Stage: "_envs", StepID: "_read", Type: steps.TypeReadReleaseValues, Attempt: 1, Inputs: in,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Services: steps.NewServices(map[string]any{steps.ServiceSCM: connector.Static{"release": p}})}
		return def.New().Run(ctx, sc)
	}
	key := func(f, k string) any { return map[string]any{"file": f, "key": k} }
	in := map[string]any{"connector": "release", "repo": "acme/release", "commit": sha, "before": base.SHA,
		"keys": []any{key("envs/dev/config.json", "image.tag"), key("envs/dev/config.json", "image.digest"), key("envs/qa/values.yaml", "image.tag"), key("envs/old/config.json", "image.tag")}}
	res, err := run(in)
	if err != nil || res.Status != steps.Succeeded {
		t.Fatalf("read: %v %+v", err, res)
	}
	rr, err := steps.DecodeReadResult(res.Outputs)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]steps.ReadFile{}
	for _, f := range rr.Files {
		files[f.File] = f
	}
	if dev := files["envs/dev/config.json"]; !dev.Exists || len(dev.Values) != 2 || dev.Values[0].Value != "1.7.0" || !dev.Values[0].Found || dev.Values[1].Found {
		t.Errorf("dev: %+v", dev)
	}
	if old := files["envs/old/config.json"]; old.Exists || old.Error != "" {
		t.Errorf("a deleted file: %+v, want exists false and no error", old)
	}
	if qa := files["envs/qa/values.yaml"]; !qa.Exists || len(qa.Values) != 1 || qa.Values[0].Found || !strings.Contains(qa.Values[0].Error, "YAML syntax error at line 1") {
		t.Errorf("a file that is not YAML: %+v, want its parse error on the key, not found", qa)
	}
	if strings.Join(rr.Changed, ",") != "envs/dev/config.json,envs/old/config.json,envs/qa/values.yaml" || rr.Before != base.SHA {
		t.Errorf("changed %v (before %s)", rr.Changed, rr.Before)
	}

	// Forge errors: a 502 is transient (the worker retries it), a 403 is not.
	_ = gh.InjectFault(scmtest.Fault{Method: "GET", PathPattern: "envs/dev/config.json", Status: 502, Times: 1})
	if _, err := run(in); err == nil || steps.IsTerminal(err) {
		t.Errorf("502: %v, want a transient error", err)
	}
	_ = gh.InjectFault(scmtest.Fault{Method: "GET", PathPattern: "envs/dev/config.json", Status: 403, Times: 1})
	if _, err := run(in); err == nil || !steps.IsTerminal(err) || !strings.Contains(err.Error(), "envs/dev/config.json") || strings.Contains(err.Error(), scmtest.DefaultToken) {
		t.Errorf("403: %v, want a terminal error naming the file, without the token", err)
	}

	// Mistaken and hostile inputs: refused with the field, nothing read.
	gh.ResetCalls()
	many := make([]any, steps.MaxReadFiles+1)
	for i := range many {
		many[i] = "f" + strings.Repeat("x", i%5) + ".json"
	}
	for name, bad := range map[string]map[string]any{
		"keys":                   {"connector": "release", "repo": "acme/release", "commit": sha, "keys": []any{map[string]any{"file": "a.json"}}},
		"..":                     {"connector": "release", "repo": "acme/release", "commit": sha, "files": []any{"../../etc/passwd"}},
		"files: nothing to read": {"connector": "release", "repo": "acme/release", "commit": sha},
		"at most":                {"connector": "release", "repo": "acme/release", "commit": sha, "files": many},
		"commit":                 {"connector": "release", "repo": "acme/release", "files": []any{"a.json"}},
	} {
		if _, err := run(bad); err == nil || !steps.IsTerminal(err) && name != "commit" || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if n := len(gh.Calls()); n != 0 {
		t.Errorf("bad inputs made %d forge calls", n)
	}
}
