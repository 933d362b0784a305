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

func TestStatusCheck(t *testing.T) {
	for _, tt := range []struct {
		sha  string
		st   Status
		want string
	}{
		{"abc", Status{Context: "prflow/dev", State: StatusSuccess}, ""},
		{"abc", Status{Context: "prflow/dev", State: StatusError}, ""},
		{"", Status{Context: "prflow/dev", State: StatusSuccess}, "commit SHA and status context are required"},
		{"abc", Status{State: StatusSuccess}, "commit SHA and status context are required"},
		{"abc", Status{Context: "prflow/dev", State: "sucess"}, `unknown status state "sucess"`},
		{"abc", Status{Context: "prflow/dev"}, `unknown status state ""`},
	} {
		err := tt.st.Check(tt.sha)
		if (err == nil) != (tt.want == "") || (err != nil && err.Error() != tt.want) {
			t.Errorf("Check(%q, %+v) = %v, want %q", tt.sha, tt.st, err, tt.want)
		}
	}
}
