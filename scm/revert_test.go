package scm

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// tree is a commit's files; a missing key is a missing file.
type trees map[string]map[string]string

func (t trees) read(_ context.Context, commit, path string) ([]byte, bool, error) {
	files, ok := t[commit]
	if !ok {
		return nil, false, fmt.Errorf("unknown commit %s", commit)
	}
	v, ok := files[path]
	if !ok {
		return nil, false, nil
	}
	return []byte(v), true, nil
}

func TestPlanRevert(t *testing.T) {
	parent := map[string]string{"a": "a0", "b": "b0", "gone": "g0"}
	commit := map[string]string{"a": "a1", "b": "b0", "new": "n1"} // changed a, added new, deleted gone
	tests := []struct {
		name      string
		head      map[string]string
		want      string
		conflicts []string
	}{
		{name: "head still has the commit's versions", head: map[string]string{"a": "a1", "b": "b0", "new": "n1", "other": "x"},
			want: "[{a [97 48] false} {gone [103 48] false} {new [] true}]"},
		{name: "a file already back to the parent's version", head: map[string]string{"a": "a0", "b": "b0", "new": "n1"},
			want: "[{gone [103 48] false} {new [] true}]"},
		{name: "files changed again conflict", head: map[string]string{"a": "a2", "b": "b0", "gone": "g9"},
			conflicts: []string{"a", "gone"}}, // "new" is absent as in the parent: nothing to undo
		{name: "everything already reverted", head: map[string]string{"a": "a0", "b": "b0", "gone": "g0"}, want: "[]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := trees{"C": commit, "P": parent, "H": tc.head}
			got, err := PlanRevert(context.Background(), src.read, "C", "P", "H", []string{"new", "a", "gone", "a"})
			if tc.conflicts != nil {
				var ce *ConflictError
				if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) || fmt.Sprint(ce.Files) != fmt.Sprint(tc.conflicts) || got != nil {
					t.Fatalf("got %v, %v; want conflicts %v", got, err, tc.conflicts)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := fmt.Sprint(got); s != tc.want && !(tc.want == "[]" && len(got) == 0) {
				t.Fatalf("plan = %s, want %s", s, tc.want)
			}
		})
	}
	if _, err := PlanRevert(context.Background(), trees{}.read, "C", "P", "H", []string{"a"}); err == nil {
		t.Fatal("read errors must be returned")
	}
}

func TestNotMergeableError(t *testing.T) {
	err := fmt.Errorf("merge PR #3: %w", &NotMergeableError{Files: []string{"envs/prod.yaml"}, Msg: "conflicts"})
	if !errors.Is(err, ErrNotMergeable) || errors.Is(err, ErrConflict) {
		t.Fatalf("Is: %v", err)
	}
	if got := err.Error(); got != "merge PR #3: not mergeable: conflicts in [envs/prod.yaml]: conflicts" {
		t.Fatalf("message %q", got)
	}
}
