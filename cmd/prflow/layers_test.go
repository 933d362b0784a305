package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const modulePath = "github.com/prflow/prflow"

// layers are the module's top-level folders from the top down: a package may import its own
// layer or a lower one, never a higher one (cmd → pipelines → steps → deploy/scm → queue).
// examples holds data only. A new top-level folder must be placed here.
var layers = map[string]int{
	"cmd":       5,
	"docs":      5, // the reference pages' generator reads pipelines and steps
	"pipelines": 4,
	"steps":     3,
	"deploy":    2,
	"scm":       2,
	"queue":     1,
	"yamlconf":  1, // the config file loader: imports nothing of ours
	"examples":  0,
}

// listedPackage is what `go list -json` says of a package that the check reads.
type listedPackage struct {
	ImportPath string
	Imports    []string // the package's own imports, not its tests'
}

// layerOf is the layer of one of the module's packages; ok is false for a package outside
// the module or in a folder the table does not know.
func layerOf(importPath string) (layer int, known, inModule bool) {
	rel, ok := strings.CutPrefix(importPath, modulePath+"/")
	if !ok {
		return 0, false, importPath == modulePath
	}
	top, _, _ := strings.Cut(rel, "/")
	layer, known = layers[top]
	return layer, known, true
}

// layerViolations lists every import of a lower layer's package from a higher one, and every
// package of the module the table does not place.
func layerViolations(pkgs []listedPackage) []string {
	var out []string
	for _, p := range pkgs {
		from, known, inModule := layerOf(p.ImportPath)
		if !inModule {
			continue
		}
		if !known {
			out = append(out, fmt.Sprintf("%s: its top-level folder has no layer (add it to layers in cmd/prflow/layers_test.go)", p.ImportPath))
			continue
		}
		for _, imp := range p.Imports {
			to, known, inModule := layerOf(imp)
			if inModule && known && to > from {
				out = append(out, fmt.Sprintf("%s imports %s: a lower layer imports a higher one", p.ImportPath, imp))
			}
		}
	}
	slices.Sort(out)
	return out
}

func decodeGoList(r io.Reader) ([]listedPackage, error) {
	var pkgs []listedPackage
	dec := json.NewDecoder(r)
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
}

// The import graph of the module's packages (without their tests: integration tests such as
// deploy/e2e drive the whole stack from below) reads top to bottom.
func TestLayers(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Fatal("no go command to list the packages with")
		}
	}
	var stderr bytes.Buffer
	cmd := exec.Command(goBin, "list", "-json=ImportPath,Imports", modulePath+"/...")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	pkgs, err := decodeGoList(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 20 || !slices.ContainsFunc(pkgs, func(p listedPackage) bool { return p.ImportPath == modulePath+"/queue" }) {
		t.Fatalf("go list found %d packages, not the module's", len(pkgs))
	}
	for _, v := range layerViolations(pkgs) {
		t.Error(v)
	}
}

// The check itself finds what it is for: an upward import, and a folder with no layer.
func TestLayerViolationsCatchesUpwardImports(t *testing.T) {
	in := `{"ImportPath": "github.com/prflow/prflow/queue", "Imports": ["encoding/json", "github.com/prflow/prflow/steps"]}
{"ImportPath": "github.com/prflow/prflow/steps", "Imports": ["github.com/prflow/prflow/pipelines/template", "github.com/prflow/prflow/steps/template", "github.com/prflow/prflow/queue"]}
{"ImportPath": "github.com/prflow/prflow/deploy/chaos", "Imports": ["github.com/prflow/prflow/scm/local", "github.com/prflow/prflow/pipelines/controller"]}
{"ImportPath": "github.com/prflow/prflow/pipelines/chaos", "Imports": ["github.com/prflow/prflow/scm/local", "github.com/prflow/prflow/pipelines/controller"]}
{"ImportPath": "github.com/prflow/prflow/pipelines", "Imports": ["github.com/prflow/prflow/steps", "github.com/prflow/prflow/queue"]}
{"ImportPath": "github.com/prflow/prflow/scm", "Imports": ["github.com/prflow/prflow/deploy/agent"]}
{"ImportPath": "github.com/prflow/prflow/tools/gen", "Imports": []}
{"ImportPath": "github.com/other/x", "Imports": ["github.com/prflow/prflow/cmd/prflow"]}`
	pkgs, err := decodeGoList(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got := layerViolations(pkgs)
	want := []string{
		"github.com/prflow/prflow/deploy/chaos imports github.com/prflow/prflow/pipelines/controller: a lower layer imports a higher one",
		"github.com/prflow/prflow/queue imports github.com/prflow/prflow/steps: a lower layer imports a higher one",
		"github.com/prflow/prflow/steps imports github.com/prflow/prflow/pipelines/template: a lower layer imports a higher one",
		"github.com/prflow/prflow/tools/gen: its top-level folder has no layer (add it to layers in cmd/prflow/layers_test.go)",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := decodeGoList(strings.NewReader(`{"ImportPath": 3}`)); err == nil || !strings.Contains(err.Error(), "go list output") {
		t.Fatalf("a garbled go list output: %v", err)
	}
}
