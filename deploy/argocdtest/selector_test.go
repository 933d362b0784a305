package argocdtest

import (
	"errors"
	"strings"
	"testing"
)

func TestSelectorMatches(t *testing.T) {
	labels := map[string]string{"env": "prod", "tier": "3", "harness.io/serviceRef": "guestbook", "empty": ""}
	cases := []struct {
		sel  string
		want bool
	}{
		{"", true},
		{"env=prod", true},
		{"env==prod", true},
		{" env = prod ", true},
		{"env=dev", false},
		{"env!=dev", true},
		{"missing!=x", true}, // != matches objects without the key
		{"env in (dev, prod)", true},
		{"env in (dev)", false},
		{"env notin (dev)", true},
		{"missing notin (dev)", true},
		{"env", true},
		{"missing", false},
		{"!missing", true},
		{"!env", false},
		{"tier>2", true},
		{"tier<3", false},
		{"env>1", false}, // not an integer label value
		{"harness.io/serviceRef=guestbook", true},
		{"env=prod,tier=3", true},
		{"env=prod,tier=4", false},
		{"empty=", true},
		{"empty in (a,)", true}, // an empty member matches an empty value
	}
	for _, tc := range cases {
		sel, err := ParseSelector(tc.sel)
		if err != nil {
			t.Errorf("ParseSelector(%q): %v", tc.sel, err)
			continue
		}
		if got := sel.Matches(labels); got != tc.want {
			t.Errorf("%q matches = %v, want %v", tc.sel, got, tc.want)
		}
	}
}

func TestSelectorErrors(t *testing.T) {
	cases := []struct {
		sel, wantMsg string
		wantPos      int
	}{
		{"env in (a", `found "end of selector", expected a value, ',' or ')'`, 9},
		{"env in ()", `the value set of "in" must not be empty`, 8},
		{"env in a", `expected '(' after "in"`, 7},
		{"env=prod,", `expected a label key`, 9},
		{"=prod", `expected a label key`, 0},
		{"env=a b", `found "b", expected ','`, 6},
		{"tier>x", `"x" is not an integer`, 5},
		{"bad key=1", `expected an operator`, 4},
		{"-env=1", `invalid label key "-env"`, 0},
		{"env=" + strings.Repeat("v", 64), `must be at most 63 characters`, 4},
		{"Example.com/x=1", `prefix part must be a lowercase DNS subdomain`, 0},
		{"!env=1", `expected ',' or end of selector after '!env'`, 4},
	}
	for _, tc := range cases {
		_, err := ParseSelector(tc.sel)
		var se *SelectorError
		if !errors.As(err, &se) {
			t.Errorf("ParseSelector(%q) error %v, want a *SelectorError", tc.sel, err)
			continue
		}
		if !strings.Contains(se.Msg, tc.wantMsg) || se.Pos != tc.wantPos || !strings.Contains(err.Error(), tc.sel) {
			t.Errorf("ParseSelector(%q) = %q at %d, want %q at %d", tc.sel, se.Msg, se.Pos, tc.wantMsg, tc.wantPos)
		}
	}
}
