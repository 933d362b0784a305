package fileedit

import (
	"errors"
	"strings"
	"testing"
)

// jobAndDeployment is issue 13's repro: a Job and a Deployment in one file.
const jobAndDeployment = `# migrations run before the rollout
apiVersion: batch/v1
kind: Job
metadata:
  name: migrate # keep
spec:
  backoffLimit: 2
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1 # scaled by prflow
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: worker
spec:
  replicas: 1
`

func TestYAMLDocumentSelector(t *testing.T) {
	web := strings.Replace(jobAndDeployment, "replicas: 1 # scaled", "replicas: 3 # scaled", 1)
	worker := strings.TrimSuffix(jobAndDeployment, "replicas: 1\n") + "replicas: 3\n"
	for _, tc := range []struct {
		name    string
		src     string
		sel     Document
		want    string
		wantErr error
		errHas  []string // substrings the error must hold
	}{
		{name: "no selector on a multi-document file", src: jobAndDeployment, wantErr: ErrAmbiguousDocument,
			errHas: []string{"3 documents", "[0] Job/migrate", "[1] Deployment/web", "[2] Deployment/worker", "document: {index: N}"}},
		{name: "by index", src: jobAndDeployment, sel: DocumentAt(1), want: web},
		{name: "by kind and name", src: jobAndDeployment, sel: Document{Kind: "Deployment", Name: "worker"}, want: worker},
		{name: "by name alone", src: jobAndDeployment, sel: Document{Name: "web"}, want: web},
		{name: "index and kind agree", src: jobAndDeployment, sel: Document{Index: DocumentAt(2).Index, Kind: "Deployment"}, want: worker},
		{name: "index and kind disagree", src: jobAndDeployment, sel: Document{Index: DocumentAt(0).Index, Kind: "Deployment"},
			wantErr: ErrNoDocument, errHas: []string{"document 0 is Job/migrate", `kind "Deployment"`}},
		{name: "kind matches several", src: jobAndDeployment, sel: Document{Kind: "Deployment"}, wantErr: ErrAmbiguousDocument,
			errHas: []string{"matches documents 1, 2", "[0] Job/migrate"}},
		{name: "kind matches none", src: jobAndDeployment, sel: Document{Kind: "StatefulSet"}, wantErr: ErrNoDocument,
			errHas: []string{`no document has kind "StatefulSet"`, "[2] Deployment/worker"}},
		{name: "kind is case-sensitive", src: jobAndDeployment, sel: Document{Kind: "deployment", Name: "web"}, wantErr: ErrNoDocument},
		{name: "index out of range", src: jobAndDeployment, sel: DocumentAt(3), wantErr: ErrNoDocument, errHas: []string{"index 3", "3 documents"}},
		{name: "negative index", src: jobAndDeployment, sel: DocumentAt(-1), wantErr: ErrNoDocument},
		{name: "single document needs no selector", src: "kind: Deployment\nspec:\n  replicas: 1\n", want: "kind: Deployment\nspec:\n  replicas: 3\n"},
		{name: "single document, selector must still match", src: "kind: Deployment\nspec:\n  replicas: 1\n", sel: Document{Kind: "Job"}, wantErr: ErrNoDocument},
		{name: "leading separator and empty trailing document", src: "---\nkind: D\nspec:\n  replicas: 1\n---\n",
			want: "---\nkind: D\nspec:\n  replicas: 3\n---\n"},
		{name: "empty file", src: "", want: "spec:\n  replicas: 3\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := Apply(YAML, []byte(tc.src), []Change{{Key: "spec.replicas", Value: 3}}, Options{Document: tc.sel})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v (output %q)", err, tc.wantErr, out)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", out, tc.want)
			}
		})
	}
}

// Successive Apply calls with different selectors edit different documents of
// one file, the way UpdateReleaseRepo applies per-variable selectors.
func TestYAMLDocumentSelectorSequence(t *testing.T) {
	out, _, err := Apply(YAML, []byte(jobAndDeployment), []Change{{Key: "spec.backoffLimit", Value: 5}}, Options{Document: Document{Kind: "Job"}})
	if err != nil {
		t.Fatal(err)
	}
	out, _, err = Apply(YAML, out, []Change{{Key: "spec.replicas", Value: 3}}, Options{Document: Document{Name: "web"}})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(strings.Replace(jobAndDeployment, "backoffLimit: 2", "backoffLimit: 5", 1), "replicas: 1 # scaled", "replicas: 3 # scaled", 1)
	if string(out) != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
}

func TestJSONDocumentSelector(t *testing.T) {
	src := "{\"kind\": \"Deployment\", \"metadata\": {\"name\": \"web\"}, \"spec\": {\"replicas\": 1}}\n"
	for _, tc := range []struct {
		name    string
		sel     Document
		wantErr error
	}{
		{"none", Document{}, nil},
		{"index 0", DocumentAt(0), nil},
		{"kind and name of the root", Document{Kind: "Deployment", Name: "web"}, nil},
		{"index 1", DocumentAt(1), ErrNoDocument},
		{"other kind", Document{Kind: "Job"}, ErrNoDocument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, changed, err := Apply(JSON, []byte(src), []Change{{Key: "spec.replicas", Value: 2}}, Options{Document: tc.sel})
			if !errors.Is(err, tc.wantErr) || (err == nil && !changed) {
				t.Fatalf("changed=%v err=%v, want %v", changed, err, tc.wantErr)
			}
		})
	}
}

func TestCreateWithDocumentSelector(t *testing.T) {
	if _, err := Create(YAML, []Change{{Key: "a", Value: 1}}, Options{Document: DocumentAt(0)}); err != nil {
		t.Fatalf("index 0 on a new file: %v", err)
	}
	for _, sel := range []Document{DocumentAt(1), {Kind: "Deployment"}, {Name: "web"}} {
		if _, err := Create(YAML, []Change{{Key: "a", Value: 1}}, Options{Document: sel}); !errors.Is(err, ErrNoDocument) {
			t.Errorf("%s on a new file: err = %v, want ErrNoDocument", sel, err)
		}
	}
}
