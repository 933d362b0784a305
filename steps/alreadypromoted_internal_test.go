package steps

import "testing"

// After an already-promoted MergePR (nothing merged, commitId empty), GitOpsSync requires the
// revision that held the values, never "whatever Argo CD resolves"; a real merge still wins.
func TestExpectedRevisionAfterAlreadyPromoted(t *testing.T) {
	head := "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		name  string
		merge map[string]any
		want  string
	}{
		{"already promoted", map[string]any{"commitId": "", "alreadyPromoted": true, "revision": head}, head},
		{"merged", map[string]any{"commitId": "feedfacefeedfacefeedfacefeedfacefeedface"}, "feedfacefeedfacefeedfacefeedfacefeedface"},
		{"nothing changed (allowNoFilesChanged)", map[string]any{"commitId": ""}, ""},
	} {
		sc := &Context{Priors: []Prior{{ID: "update", Type: "UpdateReleaseRepo"}, {ID: "merge", Type: "MergePR", Outputs: tc.merge}}}
		if got := expectedRevision(sc, &syncConfig{}); got != tc.want {
			t.Errorf("%s: expected revision %q, want %q", tc.name, got, tc.want)
		}
	}
}
