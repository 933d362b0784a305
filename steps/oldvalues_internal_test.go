package steps

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"testing"

	"github.com/prflow/prflow/scm/github"
	"github.com/prflow/prflow/scm/scmtest"
)

// A redelivered UpdateReleaseRepo that finds the PR an earlier delivery opened (and so does
// not edit the files itself) still records the old values, read from the base branch.
func TestRedeliveredUpdateRecordsOldValues(t *testing.T) {
	gh := scmtest.NewGitHub(t)
	if _, err := gh.CreateRepo("acme", "release", map[string]string{"envs/prod/config.json": "{\n  \"replicas\": 2,\n  \"image\": {\"tag\": \"1.4.1\"}\n}\n"}); err != nil {
		t.Fatal(err)
	}
	p, err := github.New(github.WithBaseURL(gh.APIURL()), github.WithToken(scmtest.DefaultToken))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	services := NewServices(map[string]any{ServiceSCM: oneSCM{p}})
	inputs := func() map[string]any {
		return map[string]any{"connector": "c", "repo": "acme/release", "filePath": "envs/prod/config.json", "variables": []any{
			map[string]any{"name": "replicas", "type": "Number", "value": "3"},
			map[string]any{"name": "image.tag", "type": "String", "value": "1.5.0"},
			map[string]any{"name": "region", "type": "String", "value": "eu", "create": true}}}
	}
	want := []EditedKey{
		{File: "envs/prod/config.json", Key: "replicas", Value: int64(3), Old: int64(2), HasOld: true},
		{File: "envs/prod/config.json", Key: "image.tag", Value: "1.5.0", Old: "1.4.1", HasOld: true},
		{File: "envs/prod/config.json", Key: "region", Value: "eu", Created: true},
	}
	var prs []any
	for delivery := 1; delivery <= 2; delivery++ {
		sc := &Context{RunID: "r1", Pipeline: "p", Stage: "s", StepID: "u", Attempt: 1, Delivery: delivery, Log: log, Services: services, Inputs: inputs()}
		res, err := runUpdateReleaseRepo(context.Background(), sc)
		if err != nil || res.Status != Succeeded {
			t.Fatalf("delivery %d: %v %+v", delivery, err, res)
		}
		got := EditedKeys(res.Outputs["edits"])
		for i := range got {
			got[i].Value, got[i].Old = normalizeNumber(got[i].Value), normalizeNumber(got[i].Old)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("delivery %d: edits %#v\nwant %#v", delivery, got, want)
		}
		prs = append(prs, res.Outputs["prNumber"])
	}
	if prs[0] != prs[1] {
		t.Fatalf("the redelivery opened another PR: %v", prs)
	}
}

// normalizeNumber makes the numbers a step writes (int, int64, float64) comparable.
func normalizeNumber(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case float64:
		if x == float64(int64(x)) {
			return int64(x)
		}
	}
	return v
}
