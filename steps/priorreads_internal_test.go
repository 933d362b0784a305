package steps

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestPriorsDeclaredMatchCode checks every built-in step type's Priors declaration against
// its code: from the function its Definition.New names, every function of this package it can
// reach (by name: a method call reaches every method of that name) that touches sc.Priors
// contributes the step types it compares a prior's Type with, or "all" when it compares none.
// A step that reads a prior type it does not declare would run without that prior (the
// controller leaves it out of the job); one that declares a type it never reads makes its jobs
// carry outputs for nothing.
func TestPriorsDeclaredMatchCode(t *testing.T) {
	fset, files := parseDir(t, ".")
	// The analysis sees reads through sc (a variable or a field): anything else called Priors
	// outside the registry would be a read it misses.
	for _, f := range files {
		ast.Inspect(f, func(x ast.Node) bool {
			if s, ok := x.(*ast.SelectorExpr); ok && s.Sel.Name == "Priors" && !isContext(s.X) && f.Name.Name == "steps" {
				if id, ok := s.X.(*ast.Ident); !ok || id.Name != "d" {
					t.Errorf("%s: .Priors read through %T, not through a Context named sc: the analysis below cannot see it", fset.Position(s.Pos()), s.X)
				}
			}
			return true
		})
	}
	reads := priorReadsOf(files)
	if len(reads) < 8 {
		t.Fatalf("found Register calls for %d step types in steps/*.go; the analysis is broken", len(reads))
	}
	// A few reads the analysis must see, or it proves nothing.
	for typ, want := range map[string]string{"GitOpsSync": "MergePR", "StageGate": "FetchLinkedApps", "MergePR": "RevertPR", "RevertPR": "UpdateReleaseRepo"} {
		if !slices.Contains(reads[typ], want) {
			t.Fatalf("analysis: %s reads %v, expected it to see %s", typ, reads[typ], want)
		}
	}
	for typ, got := range reads {
		def, ok := Default.Lookup(typ)
		if !ok {
			t.Errorf("%s: registered in the source but not in Default", typ)
			continue
		}
		if slices.Contains(got, priorsAll) {
			if def.Priors != nil {
				t.Errorf("%s: its code reads priors of any type, but it declares Priors %v (declare nothing)", typ, def.Priors)
			}
			continue
		}
		if def.Priors == nil {
			t.Errorf("%s: declares no Priors (gets every earlier step); its code reads %v: declare them (NoPriors when none)", typ, got)
			continue
		}
		for _, g := range got {
			if !slices.Contains(def.Priors, g) {
				t.Errorf("%s: its code reads %s priors, which its Priors %v leave out of its jobs", typ, g, def.Priors)
			}
		}
		for _, d := range def.Priors {
			if !slices.Contains(got, d) {
				t.Errorf("%s: declares Priors %s, which its code never reads", typ, d)
			}
		}
	}
}

// TestPriorsAnalysisCatchesUndeclaredRead runs the analysis on a made-up step whose helper
// reads MergePR priors through a method, so the test above can fail.
func TestPriorsAnalysisCatchesUndeclaredRead(t *testing.T) {
	src := `package steps
const typeMerge = "MergePR"
type helper struct{ sc *Context }
func (h helper) commit() string {
	for _, p := range h.sc.Priors {
		if p.Type == typeMerge { return "x" }
	}
	return ""
}
func runX(ctx context.Context, sc *Context) (Result, error) { _ = helper{sc}.commit(); return Result{}, nil }
func runY(ctx context.Context, sc *Context) (Result, error) {
	for _, p := range sc.Priors { switch p.Type { case "A", "B": } }
	return Result{}, nil
}
func runZ(ctx context.Context, sc *Context) (Result, error) { return Result{Outputs: map[string]any{"n": len(sc.Priors)}}, nil }
func init() {
	Register(Definition{Type: "X", New: func() Step { return StepFunc(runX) }})
	Register(Definition{Type: "Y", New: func() Step { return StepFunc(runY) }})
	Register(Definition{Type: "Z", New: func() Step { return StepFunc(runZ) }})
	Register(Definition{Type: "N", New: func() Step { return StepFunc(runNoop) }})
}
`
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := priorReadsOf([]*ast.File{f})
	want := map[string][]string{"X": {"MergePR"}, "Y": {"A", "B"}, "Z": {priorsAll}, "N": nil}
	for typ, w := range want {
		if !slices.Equal(got[typ], w) {
			t.Errorf("%s: analysis says %v, want %v", typ, got[typ], w)
		}
	}
}

const priorsAll = "(all)"

func parseDir(t *testing.T, dir string) (*token.FileSet, []*ast.File) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		src, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, n, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return fset, files
}

// priorReadsOf maps each step type registered in files to the prior types its code reads
// (sorted; priorsAll when some function reads priors without naming a type).
func priorReadsOf(files []*ast.File) map[string][]string {
	consts := map[string]string{}
	funcs := map[string][]ast.Node{}   // function name → declaration
	byName := map[string][]ast.Node{}  // method name → methods of every type
	methods := map[string][]ast.Node{} // receiver type → its methods
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				if d.Tok != token.CONST {
					continue
				}
				for _, s := range d.Specs {
					vs := s.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							if s, ok := stringLit(vs.Values[i], nil); ok {
								consts[n.Name] = s
							}
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil {
					funcs[d.Name.Name] = append(funcs[d.Name.Name], d)
					continue
				}
				byName[d.Name.Name] = append(byName[d.Name.Name], d)
				rt := d.Recv.List[0].Type
				if s, ok := rt.(*ast.StarExpr); ok {
					rt = s.X
				}
				if ix, ok := rt.(*ast.IndexExpr); ok {
					rt = ix.X
				}
				if id, ok := rt.(*ast.Ident); ok {
					methods[id.Name] = append(methods[id.Name], d)
				}
			}
		}
	}
	// edges: the functions a node names (a call or a function value), the methods of the
	// types it names, and for x.m every method called m. Identifiers the parser resolved to
	// a local variable or parameter, and struct keys of composite literals, name nothing.
	edges := func(n ast.Node) []ast.Node {
		var out []ast.Node
		var walk func(x ast.Node) bool
		walk = func(x ast.Node) bool {
			switch x := x.(type) {
			case *ast.SelectorExpr:
				out = append(out, byName[x.Sel.Name]...)
				ast.Inspect(x.X, walk)
				return false
			case *ast.KeyValueExpr:
				if id, ok := x.Key.(*ast.Ident); !ok || id.Obj != nil {
					ast.Inspect(x.Key, walk)
				}
				ast.Inspect(x.Value, walk)
				return false
			case *ast.Ident:
				if x.Obj == nil || x.Obj.Kind == ast.Fun {
					out = append(out, funcs[x.Name]...)
				}
				if x.Obj == nil || x.Obj.Kind == ast.Typ {
					out = append(out, methods[x.Name]...)
				}
			}
			return true
		}
		if fd, ok := n.(*ast.FuncDecl); ok {
			if fd.Body != nil {
				ast.Inspect(fd.Body, walk)
			}
			if fd.Recv != nil {
				ast.Inspect(fd.Recv, walk) // a method reaches its type's other methods only through calls
			}
			return out
		}
		ast.Inspect(n, walk)
		return out
	}
	// own: the prior types one function compares with, if it touches Priors.
	own := func(n ast.Node) []string {
		touches := false
		var types []string
		ast.Inspect(n, func(x ast.Node) bool {
			switch x := x.(type) {
			case *ast.SelectorExpr:
				if x.Sel.Name == "Priors" && isContext(x.X) {
					touches = true
				}
			case *ast.BinaryExpr:
				if x.Op == token.EQL || x.Op == token.NEQ {
					for _, pair := range [][2]ast.Expr{{x.X, x.Y}, {x.Y, x.X}} {
						if isTypeField(pair[0]) {
							if s, ok := stringLit(pair[1], consts); ok {
								types = append(types, s)
							}
						}
					}
				}
			case *ast.SwitchStmt:
				if x.Tag != nil && isTypeField(x.Tag) {
					for _, c := range x.Body.List {
						for _, e := range c.(*ast.CaseClause).List {
							if s, ok := stringLit(e, consts); ok {
								types = append(types, s)
							}
						}
					}
				}
			}
			return true
		})
		if !touches {
			return nil
		}
		if len(types) == 0 {
			return []string{priorsAll}
		}
		return types
	}
	out := map[string][]string{}
	for _, f := range files {
		ast.Inspect(f, func(x ast.Node) bool {
			call, ok := x.(*ast.CallExpr)
			if !ok || len(call.Args) != 1 {
				return true
			}
			if id, ok := call.Fun.(*ast.Ident); !ok || id.Name != "Register" {
				return true
			}
			lit, ok := call.Args[0].(*ast.CompositeLit)
			if !ok {
				return true
			}
			var typ string
			var root ast.Node
			for _, el := range lit.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				switch kv.Key.(*ast.Ident).Name {
				case "Type":
					typ, _ = stringLit(kv.Value, consts)
				case "New":
					root = kv.Value
				}
			}
			if typ == "" || root == nil {
				return true
			}
			seen := map[ast.Node]bool{}
			set := map[string]bool{}
			stack := []ast.Node{root}
			for len(stack) > 0 {
				n := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				if seen[n] {
					continue
				}
				seen[n] = true
				for _, s := range own(n) {
					set[s] = true
				}
				stack = append(stack, edges(n)...)
			}
			var list []string
			for s := range set {
				list = append(list, s)
			}
			sort.Strings(list)
			out[typ] = list
			return true
		})
	}
	return out
}

// isContext: a step's Context is named sc, as a variable or a field (r.sc.Priors); other
// things called Priors (a Definition's) are no read of earlier steps.
func isContext(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == "sc"
	case *ast.SelectorExpr:
		return e.Sel.Name == "sc"
	}
	return false
}

// isTypeField: x.Type or x[i].Type (a prior's type, or anything else's: over-counting only
// asks for a declaration the test then reports as never read).
func isTypeField(e ast.Expr) bool {
	s, ok := e.(*ast.SelectorExpr)
	return ok && s.Sel.Name == "Type"
}

func stringLit(e ast.Expr, consts map[string]string) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		}
	case *ast.Ident:
		s, ok := consts[e.Name]
		return s, ok
	}
	return "", false
}

// A mistaken Priors declaration (an empty name, a type twice) is refused at Register; a
// looked-up definition registered again keeps its Priors, nil or empty as declared.
func TestRegisterChecksPriors(t *testing.T) {
	run := func() Step { return StepFunc(runNoop) }
	for _, bad := range [][]string{{""}, {"MergePR", "MergePR"}} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), `type "Bad": Priors names`) {
					t.Errorf("Priors %q: recover() = %v", bad, r)
				}
			}()
			NewRegistry().Register(Definition{Type: "Bad", Priors: bad, New: run})
		}()
	}
	r := NewRegistry()
	for _, typ := range []string{"Noop", "GitOpsSync"} {
		d, _ := Default.Lookup(typ)
		r.Register(*d)
		again, _ := r.Lookup(typ)
		if again.Priors == nil || !slices.Equal(again.Priors, d.Priors) {
			t.Errorf("%s registered again: Priors %#v, want %#v", typ, again.Priors, d.Priors)
		}
	}
	r.Register(Definition{Type: "Custom", New: run})
	if c, _ := r.Lookup("Custom"); c.Priors != nil {
		t.Errorf("a type that declares nothing got Priors %#v", c.Priors)
	}
}
