package scm

import (
	"errors"
	"strings"
	"testing"
)

func TestFirstError(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	if err := FirstError(); err != nil {
		t.Errorf("no checks: %v", err)
	}
	if err := FirstError(nil, nil); err != nil {
		t.Errorf("all passed: %v", err)
	}
	if err := FirstError(nil, a, b); err != a {
		t.Errorf("got %v, want the first failure", err)
	}
}

func TestArgumentChecks(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"sha", CheckSHA("abc"), ""},
		{"empty sha", CheckSHA(""), "empty commit SHA"},
		{"comment", CheckComment("lgtm"), ""},
		{"empty comment", CheckComment(""), "empty comment"},
		{"blank comment", CheckComment(" \n\t"), "empty comment"},
		{"new PR", NewPR{Head: "h", Base: "main", Title: "t"}.Check(), ""},
		{"no head", NewPR{Base: "main", Title: "t"}.Check(), "NewPR.Head and NewPR.Base are required"},
		{"no base", NewPR{Head: "h", Title: "t"}.Check(), "NewPR.Head and NewPR.Base are required"},
		{"blank title", NewPR{Head: "h", Base: "main", Title: "  "}.Check(), "NewPR.Title is empty"},
		{"no head nor title", NewPR{}.Check(), "NewPR.Head and NewPR.Base are required"},
	} {
		if (tt.err == nil) != (tt.want == "") || (tt.err != nil && !strings.Contains(tt.err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, tt.err, tt.want)
		}
	}
}
