package main

import "testing"

// A preview app line never says "no change" or "0 resources" for what was not rendered or
// could not be compared.
func TestAppDiffTextNotRendered(t *testing.T) {
	for _, tc := range []struct {
		m    map[string]any
		want string
	}{
		{map[string]any{"created": true, "specNotRendered": true}, "web-qa (new app, resources not rendered)"},
		{map[string]any{"created": true, "resources": []any{map[string]any{}}}, "web-qa (new app, 1 resource(s))"},
		{map[string]any{"specChanges": []any{"x: a → b"}, "specNotRendered": true}, "web-qa (spec changes, resources not rendered)"},
		{map[string]any{"secretsNotCompared": []any{"ns/db: password"}}, "web-qa (no change seen, Secret values not compared)"},
		{map[string]any{}, "web-qa (no change)"},
	} {
		if got := appDiffText("web-qa", tc.m); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.m, got, tc.want)
		}
	}
}
