package fileedit

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

const annotatedYAML = `metadata:
  name: web
  annotations:
    argocd.argoproj.io/sync-wave: "1" # keep
    team: core
spec: {}
`

const annotatedJSON = `{
  "metadata": {
    "annotations": {
      "argocd.argoproj.io/sync-wave": "1",
      "team": "core"
    }
  }
}
`

// TestDottedLiteralRefused: an unquoted path whose remaining segments, joined with dots,
// name a key the map holds literally is refused with the quoted form, in both formats and
// also when an earlier mistaken run left the nested maps behind (the walk would succeed).
func TestDottedLiteralRefused(t *testing.T) {
	leftover := strings.Replace(annotatedYAML, "    team: core\n", "    team: core\n    argocd:\n      argoproj:\n        io/sync-wave: \"5\"\n", 1)
	for _, tc := range []struct {
		name, src string
		f         Format
		key       string
		want      string
	}{
		{"yaml", annotatedYAML, YAML, "metadata.annotations.argocd.argoproj.io/sync-wave",
			`metadata.annotations["argocd.argoproj.io/sync-wave"]`},
		{"json", annotatedJSON, JSON, "metadata.annotations.argocd.argoproj.io/sync-wave",
			`metadata.annotations["argocd.argoproj.io/sync-wave"]`},
		{"yaml, nested leftovers of an earlier run", leftover, YAML, "metadata.annotations.argocd.argoproj.io/sync-wave",
			`metadata.annotations["argocd.argoproj.io/sync-wave"]`},
		{"yaml, key below the dotted one", "a:\n  x.y:\n    z: 1\n", YAML, "a.x.y.z", `a["x.y"].z`},
		{"json, dotted key at the root", `{"x.y": {"z": [1]}}`, JSON, "x.y.z[0]", `["x.y"].z[0]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Apply(tc.f, []byte(tc.src), []Change{{Key: tc.key, Value: "5"}}, Options{})
			var ke *KeyError
			if !errors.Is(err, ErrDottedKey) || !errors.As(err, &ke) || ke.Key != tc.key {
				t.Fatalf("Apply(%s) error = %v; want an ErrDottedKey KeyError for the key", tc.key, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not give the quoted form %s", err, tc.want)
			}
		})
	}
}

// TestQuotedPathEdits: the quoted forms edit the literal key in place, byte for byte.
func TestQuotedPathEdits(t *testing.T) {
	wantYAML := strings.Replace(annotatedYAML, `sync-wave: "1"`, `sync-wave: "5"`, 1)
	wantJSON := strings.Replace(annotatedJSON, `sync-wave": "1"`, `sync-wave": "5"`, 1)
	for _, tc := range []struct {
		name, src, key, want string
		f                    Format
	}{
		{"yaml brackets", annotatedYAML, `metadata.annotations["argocd.argoproj.io/sync-wave"]`, wantYAML, YAML},
		{"yaml dot-quoted", annotatedYAML, `metadata.annotations."argocd.argoproj.io/sync-wave"`, wantYAML, YAML},
		{"yaml backslashes", annotatedYAML, `metadata.annotations.argocd\.argoproj\.io/sync-wave`, wantYAML, YAML},
		{"json brackets", annotatedJSON, `metadata.annotations["argocd.argoproj.io/sync-wave"]`, wantJSON, JSON},
		{"json dot-quoted", annotatedJSON, `metadata.annotations."argocd.argoproj.io/sync-wave"`, wantJSON, JSON},
		{"yaml bracket then more path", "a:\n  x.y:\n    z: 1 # c\n", `a["x.y"].z`, "a:\n  x.y:\n    z: 2 # c\n", YAML},
		{"new dotted key in brackets", "labels:\n  team: core\n", `labels["app.kubernetes.io/name"]`, "labels:\n  team: core\n  app.kubernetes.io/name: \"5\"\n", YAML},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := any("5")
			if tc.name == "yaml bracket then more path" {
				v = int64(2)
			}
			out, changed, err := Apply(tc.f, []byte(tc.src), []Change{{Key: tc.key, Value: v}}, Options{})
			if err != nil || !changed || string(out) != tc.want {
				t.Fatalf("Apply(%s) = %q, %v, %v; want %q", tc.key, out, changed, err, tc.want)
			}
		})
	}
}

// TestCreatedHook: Options.Created sees every key or item the file lacks, with the keys of
// the map it would go into, and its error refuses the change; keys that exist never call it.
func TestCreatedHook(t *testing.T) {
	src := "image:\n  repository: web\n  tag: \"1\"\nenv:\n  - name: A\nextra: null\n"
	for _, tc := range []struct {
		key  string
		want *Creation
	}{
		{"image.tag", nil},
		{"env[0].name", nil},
		{"image.tga", &Creation{Key: "image.tga", At: "image.tga", Missing: "tga", Siblings: []string{"repository", "tag"}}},
		{"imgae.tag", &Creation{Key: "imgae.tag", At: "imgae", Missing: "imgae", Siblings: []string{"image", "env", "extra"}}},
		{"env[1].name", &Creation{Key: "env[1].name", At: "env[1]", Item: true}},
		{"extra.x", &Creation{Key: "extra.x", At: "extra.x", Missing: "x"}},
	} {
		var got []Creation
		refuse := errors.New("refused")
		opts := Options{Created: func(c Creation) error { got = append(got, c); return refuse }}
		_, _, err := Apply(YAML, []byte(src), []Change{{Key: tc.key, Value: "2"}}, opts)
		if tc.want == nil {
			if err != nil || len(got) != 0 {
				t.Errorf("%s: err %v, hook calls %v; want neither", tc.key, err, got)
			}
			continue
		}
		if !errors.Is(err, refuse) || len(got) != 1 || !reflect.DeepEqual(got[0], *tc.want) {
			t.Errorf("%s: err %v, hook calls %+v; want the refusal and %+v", tc.key, err, got, *tc.want)
		}
		// Without an error the key is created as before.
		opts.Created = func(Creation) error { return nil }
		if _, changed, err := Apply(YAML, []byte(src), []Change{{Key: tc.key, Value: "2"}}, opts); err != nil || !changed {
			t.Errorf("%s with an accepting hook: changed %v, err %v", tc.key, changed, err)
		}
	}
	// JSON takes the same walk.
	var calls int
	_, _, err := Apply(JSON, []byte(`{"image": {"tag": "1"}}`), []Change{{Key: "image.tga", Value: "2"}},
		Options{Created: func(c Creation) error { calls++; return fmt.Errorf("no %s", c.At) }})
	if err == nil || err.Error() != "no image.tga" || calls != 1 {
		t.Errorf("JSON: err %v after %d calls; want the hook's refusal", err, calls)
	}
	// Create (a new file) never asks.
	if _, err := Create(YAML, []Change{{Key: "a.b", Value: "1"}}, Options{Created: func(Creation) error { return errors.New("asked") }}); err != nil {
		t.Errorf("Create with a refusing hook: %v", err)
	}
}
