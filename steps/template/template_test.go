package template

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func testEnv() map[string]any {
	return map[string]any{
		"env":     map[string]any{"name": "dev"},
		"cluster": map[string]any{"name": "east"},
		"matrix":  map[string]any{"region": "eu"},
		"trim":    map[string]any{"x": "t"},
		"len":     map[string]any{"x": "l"},
		"map":     map[string]any{"x": "m"},
		"all":     map[string]any{"x": "a"},
		"now":     map[string]any{"x": "n"},
		"inputs": map[string]any{
			"count": 3,
			"ratio": 1.5,
			"flag":  true,
			"tags":  []any{"a", "b"},
		},
		"steps": map[string]any{
			"update": map[string]any{"outputs": map[string]any{
				"prNumber": 42.0, // JSON numbers decode as float64
				"commitId": "abc123",
				"prlink":   "https://git/pr/42",
			}},
		},
		"pipeline": map[string]any{
			"variables": map[string]any{"env": "prod", "csv": "a,b,c", "name": "  My-App  ", "empty": ""},
			"stages": map[string]any{"S": map[string]any{"spec": map[string]any{"execution": map[string]any{
				"steps": map[string]any{"X": map[string]any{"updateReleaseRepoOutcome": map[string]any{"commitId": "c0ffee"}}},
			}}}},
		},
		"stage":   map[string]any{"variables": map[string]any{"x": "y"}},
		"nothing": nil,
	}
}

func TestEval(t *testing.T) {
	tests := []struct {
		name    string
		src     string
		want    any
		literal bool
	}{
		// literals
		{"literal", "release/values.yaml", "release/values.yaml", true},
		{"literal with closers", "a }} b > c", "a }} b > c", true},
		{"empty", "", "", true},

		// a whole expression keeps its type
		{"whole int", "${{ inputs.count }}", 3, false},
		{"whole float from JSON", "${{ steps.update.outputs.prNumber }}", 42.0, false},
		{"whole bool harness", "<+inputs.flag>", true, false},
		{"whole list", "${{ inputs.tags }}", []any{"a", "b"}, false},
		{"whole map", "${{ steps.update.outputs }}", map[string]any{"prNumber": 42.0, "commitId": "abc123", "prlink": "https://git/pr/42"}, false},
		{"whole arithmetic", "${{ 1 + 2 }}", 3, false},
		{"whole float arithmetic", "${{ inputs.ratio * 2 }}", 3.0, false},
		{"whole nil", "${{ nothing }}", nil, false},

		// mixed text is a string
		{"mixed both delimiters", "v${{ steps.update.outputs.prNumber }}-<+env.name>", "v42-dev", false},
		{"leading space makes it text", " ${{ env.name }}", " dev", false},
		{"mixed scalars", "r=${{ inputs.ratio }} n=${{ inputs.count }} f=${{ inputs.flag }}", "r=1.5 n=3 f=true", false},
		{"mixed list as JSON", "tags=${{ inputs.tags }}", `tags=["a","b"]`, false},
		{"mixed map as JSON", "out=${{ steps.update.outputs }}", `out={"commitId":"abc123","prNumber":42,"prlink":"https://git/pr/42"}`, false},
		{"two expressions no text", "${{ env.name }}${{ cluster.name }}", "deveast", false},
		{"two numbers no text", "${{ inputs.count }}<+inputs.count>", "33", false},
		{"harness stage path", "<+pipeline.stages.S.spec.execution.steps.X.updateReleaseRepoOutcome.commitId>", "c0ffee", false},
		{"path template", "apps/<+env.name>/<+cluster.name>/values.yaml", "apps/dev/east/values.yaml", false},

		// escaping
		{"escaped native", `\${{ env.name }}`, "${{ env.name }}", true},
		{"escaped harness", `\<+env.name>`, "<+env.name>", true},
		{"escaped backslash then expression", `\\${{ env.name }}`, `\dev`, false},
		{"escaped backslash and delimiter", `\\\${{ env.name }}`, `\${{ env.name }}`, true},
		{"other backslashes kept", `a\b\c`, `a\b\c`, true},
		{"windows path", `C:\dir\\<+env.name>`, `C:\dir\dev`, false},
		{"escaped and live", `\<+x> is <+env.name>`, "<+x> is dev", false},

		// nested braces, quotes and delimiters
		{"map literal braces", `${{ {"a": {"b": 1}}.a.b }}`, 1, false},
		{"closer in string", `${{ "}}" }}`, "}}", false},
		{"closer in single quotes", `${{ '}}' + env.name }}`, "}}dev", false},
		{"gt in harness string", `<+ "a>b" >`, "a>b", false},
		{"gt in method arg", `<+"x>y".split(">")>`, []any{"x", "y"}, false},
		{"gt in parentheses", `<+ (2 > 1) >`, true, false},
		{"first gt closes harness", `<+ 2 > 1 >`, "2 1 >", false},
		{"nested harness", `<+<+pipeline.variables.csv>.split(",")>`, []any{"a", "b", "c"}, false},
		{"harness inside native", `${{ <+env.name> }}`, "dev", false},
		{"list index", `${{ [1, 2][1] }}`, 2, false},

		// names expr treats specially still work as variable roots
		{"root env native", "${{ env.name }}", "dev", false},
		{"root env harness", "<+env.name>", "dev", false},
		{"root matrix", "${{ matrix.region }}", "eu", false},
		{"root trim", "<+trim.x>", "t", false},
		{"root len", "${{ len.x }}", "l", false},
		{"root map", "<+map.x>", "m", false},
		{"root all", "${{ all.x }}", "a", false},
		{"root now", "<+now.x>", "n", false},
		{"builtin len still callable", "${{ len(inputs.tags) }}", 2, false},

		// ?? and ?. are lenient
		{"?? missing key", `${{ steps.update.outputs.missing ?? "d" }}`, "d", false},
		{"?? missing chain", `${{ steps.nope.outputs.x ?? "d" }}`, "d", false},
		{"?? missing root", `${{ stepz.a ?? 1 }}`, 1, false},
		{"?? present", `${{ steps.update.outputs.commitId ?? "d" }}`, "abc123", false},
		{"?? chained", `${{ a.b ?? c.d ?? "z" }}`, "z", false},
		{"?? nil", `${{ nothing ?? "n" }}`, "n", false},
		{"?? index", `${{ inputs.tags[5] ?? "none" }}`, "none", false},
		{"?? method on missing", `${{ pipeline.variables.nope.trim() ?? "t" }}`, "t", false},
		{"?. missing", `${{ steps.nope?.outputs }}`, nil, false},
		{"?. present", `${{ steps.update?.outputs.commitId }}`, "abc123", false},
		{"?. nil", `${{ nothing?.x }}`, nil, false},
		{"?. then ??", `${{ nothing?.x ?? "y" }}`, "y", false},
		{"?. method", `${{ nothing?.trim() }}`, nil, false},

		// Harness methods
		{"split", `<+pipeline.variables.csv.split(",")>`, []any{"a", "b", "c"}, false},
		{"contains string", `<+pipeline.variables.csv.contains("b,")>`, true, false},
		{"contains list", `${{ inputs.tags.contains("b") }}`, true, false},
		{"contains list absent", `${{ inputs.tags.contains("z") }}`, false, false},
		{"toLowerCase", `<+pipeline.variables.name.toLowerCase()>`, "  my-app  ", false},
		{"toUpperCase", `<+pipeline.variables.name.toUpperCase()>`, "  MY-APP  ", false},
		{"startsWith", `<+pipeline.variables.csv.startsWith("a,")>`, true, false},
		{"endsWith", `<+pipeline.variables.csv.endsWith("x")>`, false, false},
		{"replace", `<+pipeline.variables.csv.replace(",", ";")>`, "a;b;c", false},
		{"trim", `<+pipeline.variables.name.trim()>`, "My-App", false},
		{"length string", `<+pipeline.variables.csv.length()>`, 5, false},
		{"length list", `${{ inputs.tags.length() }}`, 2, false},
		{"equals", `<+pipeline.variables.env.equals("prod")>`, true, false},
		{"equals false", `<+pipeline.variables.env.equals("dev")>`, false, false},
		{"substring from", `<+pipeline.variables.csv.substring(2)>`, "b,c", false},
		{"substring range", `<+pipeline.variables.csv.substring(0, 1)>`, "a", false},
		{"substring runes", `${{ "héllo".substring(1, 2) }}`, "é", false},
		{"indexOf", `<+pipeline.variables.csv.indexOf("c")>`, 4, false},
		{"indexOf absent", `<+pipeline.variables.csv.indexOf("z")>`, -1, false},
		{"concat", `<+pipeline.variables.env.concat("-1")>`, "prod-1", false},
		{"method chain", `<+pipeline.variables.name.trim().toLowerCase().replace("-", "_")>`, "my_app", false},
		{"method then index", `<+pipeline.variables.csv.split(",")[1]>`, "b", false},
		{"method in mixed text", `app-<+pipeline.variables.name.trim().toLowerCase()>`, "app-my-app", false},

		// expr features keep working
		{"builtin upper", "${{ upper(env.name) }}", "DEV", false},
		{"builtin join", `${{ join(inputs.tags, "+") }}`, "a+b", false},
		{"predicate filter", `${{ filter(inputs.tags, # != "a") }}`, []any{"b"}, false},
		{"predicate over env data", `${{ any(inputs.tags, # == env.name) }}`, false, false},
		{"toJSON compact", `${{ toJSON(inputs.tags) }}`, `["a","b"]`, false},
		{"string()", `${{ string(steps.update.outputs.prNumber) }}`, "42", false},
		{"in list", `${{ "b" in inputs.tags }}`, true, false},
		{"in map", `${{ "env" in pipeline.variables }}`, true, false},
		{"not in", `${{ "z" not in inputs.tags }}`, true, false},
		{"uniq", `${{ uniq([1, 1.0, "a", "a", [1], [1]]) }}`, []any{1, "a", []any{1}}, false},
		{"let", `${{ let x = 2; x * inputs.count }}`, 6, false},
		{"list equality", `${{ inputs.tags == ["a", "b"] }}`, true, false},
		{"map inequality", `${{ steps.update.outputs != pipeline.variables }}`, true, false},
		{"ternary", `${{ inputs.flag ? "on" : "off" }}`, "on", false},
		{"string concat", `${{ env.name + "-" + cluster.name }}`, "dev-east", false},
		{"slice", `${{ inputs.tags[0:1] }}`, []any{"a"}, false},
		{"negative index", `${{ inputs.tags[-1] }}`, "b", false},
		{"bracket key", `${{ pipeline["variables"].env }}`, "prod", false},
		{"computed key", `${{ pipeline.variables[env.name == "dev" ? "env" : "csv"] }}`, "prod", false},
		{"let path", `${{ let x = steps.update; x.outputs.commitId }}`, "abc123", false},
		{"let shadows variable", `${{ let steps = 1; steps + 1 }}`, 2, false},
		{"predicate field", `${{ map([{"n": 1}, {"n": 2}], .n * 10) }}`, []any{10, 20}, false},
	}
	ctx := context.Background()
	env := testEnv()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp, err := Compile(tc.src)
			if err != nil {
				t.Fatalf("Compile(%q): %v", tc.src, err)
			}
			if tp.Literal() != tc.literal {
				t.Errorf("Literal() = %v, want %v", tp.Literal(), tc.literal)
			}
			if Contains(tc.src) == tc.literal {
				t.Errorf("Contains(%q) = %v, want %v", tc.src, !tc.literal, tc.literal)
			}
			got, err := tp.Eval(ctx, env)
			if err != nil {
				t.Fatalf("Eval(%q): %v", tc.src, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Eval(%q) = %#v (%T), want %#v (%T)", tc.src, got, got, tc.want, tc.want)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name    string
		src     string
		opts    []Option
		compile bool   // fails at Compile (else at Eval)
		is      error  // errors.Is target
		msg     string // substring of the error message
		offset  int    // Error.Offset
	}{
		{"missing key lists existing keys", "prefix ${{ steps.update.outputs.prNumbr }}", nil, false, ErrMissing,
			`steps.update.outputs.prNumbr: no key "prNumbr" (have: commitId, prNumber, prlink)`, 7},
		{"missing harness key", "<+pipeline.variables.nope>", nil, false, ErrMissing,
			`pipeline.variables.nope: no key "nope" (have: csv, empty, env, name)`, 0},
		{"missing root", "${{ stepz.update }}", nil, false, ErrMissing, `stepz: no variable "stepz" (have: all, cluster, env,`, 0},
		{"missing step", "${{ steps.updat.outputs.prNumber }}", nil, false, ErrMissing, `steps.updat: no key "updat" (have: update)`, 0},
		{"read through nil", "${{ nothing.x }}", nil, false, ErrMissing, "nothing.x: nothing is nil", 0},
		{"index out of range", "${{ inputs.tags[5] }}", nil, false, ErrMissing, "inputs.tags[5]: index 5 out of range (length 2)", 0},
		{"bracket key missing", `${{ pipeline.variables["my-var"] }}`, nil, false, ErrMissing, `pipeline.variables["my-var"]: no key "my-var"`, 0},
		{"strict after ?.", "${{ steps.update?.outputs.nope }}", nil, false, ErrMissing, `steps.update.outputs.nope: no key "nope"`, 0},
		{"predicate item key", `${{ filter([{"a": 1}, {"b": 2}], .a == 1) }}`, nil, false, ErrMissing, `#.a: no key "a" (have: b)`, 0},
		{"computed key missing", "${{ steps[env.name].outputs }}", nil, false, ErrMissing, `steps.dev: no key "dev" (have: update)`, 0},
		{"let path missing", "${{ let x = steps.update; x.outputs.nope }}", nil, false, ErrMissing, `x.outputs.nope: no key "nope"`, 0},
		{"key of a string", "${{ env.name.first }}", nil, false, nil, `env.name.first: cannot read "first" from a string`, 0},
		{"nil in text", "x=${{ nothing }}", nil, false, ErrNil, "use ?? to give a default", 2},
		{"method on nil", "${{ nothing.trim() }}", nil, false, ErrNil, "nothing.trim(): receiver value is nil", 0},
		{"method receiver type", "${{ inputs.count.trim() }}", nil, false, nil, "inputs.count.trim(): receiver is int, want string", 0},
		{"substring bounds", "<+pipeline.variables.csv.substring(3, 10)>", nil, false, nil, "pipeline.variables.csv.substring(): range [3, 10) out of bounds for length 5", 0},
		{"type error", "${{ inputs.tags + 1 }}", nil, false, nil, "invalid operation", 0},
		{"method chain error names the chain", `<+pipeline.variables.name.trim().substring(9)>`, nil, false, nil, "pipeline.variables.name.trim().substring(): range [9, 6)", 0},

		{"unknown function", "a ${{ foo(1) }}", nil, true, ErrSyntax, "unknown function foo", 2},
		{"unknown method", "<+env.name.toLower()>", nil, true, ErrSyntax, `unknown method "toLower"`, 0},
		{"method arity", `<+pipeline.variables.csv.split()>`, nil, true, ErrSyntax, "method split takes 1 argument, got 0", 0},
		{"syntax", "ok ${{ 1 + }}", nil, true, ErrSyntax, "unexpected", 3},
		{"unterminated native", "abc ${{ env.name", nil, true, ErrSyntax, "missing closing }}", 4},
		{"unterminated harness", "abc <+env.name", nil, true, ErrSyntax, "missing closing >", 4},
		{"unterminated string", `${{ "abc }}`, nil, true, ErrSyntax, "unterminated string literal", 0},
		{"empty expression", "x ${{  }}", nil, true, ErrSyntax, "empty expression", 2},
		{"runtime input", "<+input>", nil, true, ErrRuntimeInput, "runtime input marker", 0},
		{"runtime input with default", `v <+input>.default("a")`, nil, true, ErrRuntimeInput, "runtime input marker", 2},
		{"$env rejected", "${{ $env }}", nil, true, ErrSyntax, "$env is not available", 0},
		{"delimiter in quotes", `${{ "<+x>" }}`, nil, true, ErrSyntax, "inside a quoted string", 0},
		{"nesting limit", strings.Repeat("<+", 40) + "x" + strings.Repeat(">", 40), nil, true, ErrSyntax, "nested more than", 2 * maxNesting},
		{"bad function name", "x", []Option{WithFunction("a-b", func(...any) (any, error) { return nil, nil })}, true, nil, `function name "a-b"`, 0},

		{"memory: range", "${{ map(1..2000000, #) }}", nil, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: repeat", `${{ repeat("ab", 600000) }}`, nil, false, ErrMemoryBudget, "memory budget exceeded", 0},
		// reverse, sort and sortBy are counted by expr's own budget only (rewrite.go): it stops them.
		{"memory: reverse chain", `${{ len(reverse(reverse(reverse(1..300)))) }}`, []Option{WithMemoryBudget(1000)}, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: sort chain", `${{ len(sort(sort(sort(1..300)))) }}`, []Option{WithMemoryBudget(1000)}, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: sortBy chain", `${{ len(sortBy(sortBy(sortBy(1..300, #), #), #)) }}`, []Option{WithMemoryBudget(1000)}, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: sort of shared lists", `${{ len(toJSON(sort(reduce(1..40, [#acc, #acc], [1])))) }}`, nil, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: string doubling", `${{ let a = repeat("x", 100); let b = a + a; let c = b + b; let d = c + c; let e = d + d; let f = e + e; f + f }}`,
			[]Option{WithMemoryBudget(5000)}, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: shared lists", `${{ let a = [1,2,3,4,5,6,7,8,9,10]; let b = [a,a,a,a,a,a,a,a,a,a]; let c = [b,b,b,b,b,b,b,b,b,b]; let d = [c,c,c,c,c,c,c,c,c,c]; let e = [d,d,d,d,d,d,d,d,d,d]; let f = [e,e,e,e,e,e,e,e,e,e]; len(f) }}`,
			nil, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: nested loops", `${{ all(inputs.tags, all(1..1000, all(1..1000, true))) }}`, nil, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: reduce doubling", `${{ len(toJSON(reduce(1..40, [#acc, #acc], 1))) }}`, nil, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: compare shared lists", `${{ reduce(1..60, [#acc, #acc], 1) == reduce(1..60, [#acc, #acc], 1) }}`, nil, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: traverse shared lists", `${{ max(reduce(1..60, [#acc, #acc], 1)) }}`, nil, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: flatten shared lists", `${{ len(flatten(reduce(1..30, [#acc, #acc], 1))) }}`, nil, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: JSON of repeated data", `${{ toJSON(map(1..100000, inputs)) }}`, nil, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: concat", `${{ concat(1..500000, 1..500000) }}`, nil, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: huge repeat count", `${{ repeat("x", 1000000000000000) }}`, nil, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: replace growth", `${{ replace(repeat("a", 1000), "a", repeat("b", 2000)) }}`, nil, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: custom budget", `${{ join(map(1..10, "abcdefghij"), "") }}`, []Option{WithMemoryBudget(60)}, false, ErrMemoryBudget, "memory budget exceeded", 0},
		{"memory: text formatting", `x${{ [[1,2,3],[4,5,6]] }}`, []Option{WithMemoryBudget(10)}, false, ErrMemoryBudget, "memory budget exceeded", 1},

		{"max nodes", "${{ 1 + 2 + 3 + 4 + 5 }}", []Option{WithMaxNodes(5)}, true, ErrMaxNodes, "maximum allowed nodes (limit 5)", 0},
		{"max nodes across expressions", "${{ 1 + 2 }} and ${{ 3 + 4 }} and ${{ 5 + 6 }}", []Option{WithMaxNodes(6)}, true, ErrMaxNodes, "maximum allowed nodes", 34},
		{"default max nodes", "${{ " + strings.Repeat("1 + ", 6000) + "1 }}", nil, true, ErrMaxNodes, "maximum allowed nodes", 0},
	}
	ctx := context.Background()
	env := testEnv()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp, err := Compile(tc.src, tc.opts...)
			if !tc.compile {
				if err != nil {
					t.Fatalf("Compile(%q): %v", tc.src, err)
				}
				_, err = tp.Eval(ctx, env)
			} else if err == nil {
				t.Fatalf("Compile(%q) succeeded, want error", tc.src)
			}
			if err == nil {
				t.Fatalf("Eval(%q) succeeded, want error", tc.src)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not contain %q", err, tc.msg)
			}
			var te *Error
			if !errors.As(err, &te) {
				if tc.name == "bad function name" {
					return // option errors have no position
				}
				t.Fatalf("error %v is not *Error", err)
			}
			if te.Offset != tc.offset {
				t.Errorf("Offset = %d, want %d (error %v)", te.Offset, tc.offset, err)
			}
			if te.Pos < te.Offset || te.Pos > len(tc.src) {
				t.Errorf("Pos = %d outside [%d, %d]", te.Pos, te.Offset, len(tc.src))
			}
			if !strings.HasPrefix(tc.src[te.Offset:], te.Expr) || te.Expr == "" {
				t.Errorf("Expr = %q is not the source at offset %d", te.Expr, te.Offset)
			}
		})
	}
}

func TestErrorPositions(t *testing.T) {
	ctx := context.Background()

	src := "abc ${{ steps.x }} def"
	tp, err := Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tp.Eval(ctx, testEnv())
	var te *Error
	if !errors.As(err, &te) {
		t.Fatalf("got %v, want *Error", err)
	}
	if want := strings.Index(src, "${{"); te.Offset != want {
		t.Errorf("Offset = %d, want %d", te.Offset, want)
	}
	if want := strings.Index(src, "steps.x"); te.Pos != want {
		t.Errorf("Pos = %d, want %d (the failing path)", te.Pos, want)
	}
	if te.Expr != "${{ steps.x }}" {
		t.Errorf("Expr = %q", te.Expr)
	}

	// Multi-byte text before the failing token: positions are bytes.
	src = "é ${{ 1 + }}"
	_, err = Compile(src)
	if !errors.As(err, &te) {
		t.Fatalf("got %v, want *Error", err)
	}
	if te.Offset != len("é ") || te.Pos <= te.Offset || te.Pos > len(src) {
		t.Errorf("Offset = %d, Pos = %d for %q", te.Offset, te.Pos, src)
	}

	// In a condition the failing operand is reported.
	cond := `<+pipeline.variables.env> == "prod" && <+stage.variables.nope> != ""`
	ct, err := CompileCondition(cond)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ct.Eval(ctx, testEnv())
	if !errors.As(err, &te) || !errors.Is(err, ErrMissing) {
		t.Fatalf("got %v, want *Error wrapping ErrMissing", err)
	}
	if want := strings.Index(cond, "<+stage"); te.Offset != want || te.Expr != "<+stage.variables.nope>" {
		t.Errorf("Offset = %d Expr = %q, want %d and the second operand", te.Offset, te.Expr, want)
	}
	if te.Pos < te.Offset || te.Pos >= te.Offset+len(te.Expr) {
		t.Errorf("Pos = %d not inside the operand", te.Pos)
	}
}

func TestCondition(t *testing.T) {
	tests := []struct {
		src  string
		want bool
	}{
		{`<+pipeline.variables.env> == "prod" && <+stage.variables.x> != ""`, true},
		{`<+pipeline.variables.env> == "dev" || <+stage.variables.x> == "z"`, false},
		{`${{ env.name == "dev" }}`, true},
		{`  ${{ env.name == "dev" }}  `, true},
		{`<+inputs.count> > 2`, true},
		{`<+inputs.count> >= 3 && <+inputs.count> < 4`, true},
		{`<+pipeline.variables.csv.contains("b")>`, true},
		{`<+pipeline.variables.csv>.contains("z")`, false},
		{`env.name == "dev"`, true},
		{`true`, true},
		{`<+steps.update.outputs.missing> ?? false`, false},
		{`<+pipeline.variables.env> in ["prod", "staging"]`, true},
		{`<+pipeline.variables.empty> == "" || <+nope.x>`, true}, // short circuit: nope is never read
		{`!(<+inputs.flag>)`, false},
		{`<+steps.update.outputs.prNumber> == 42`, true},
		{`${{ steps.update.outputs.commitId }} != <+pipeline.stages.S.spec.execution.steps.X.updateReleaseRepoOutcome.commitId>`, true},
	}
	ctx := context.Background()
	env := testEnv()
	for _, tc := range tests {
		t.Run(tc.src, func(t *testing.T) {
			tp, err := CompileCondition(tc.src)
			if err != nil {
				t.Fatalf("CompileCondition: %v", err)
			}
			if tp.Literal() {
				t.Error("a condition is never literal")
			}
			got, err := tp.EvalBool(ctx, env)
			if err != nil {
				t.Fatalf("EvalBool: %v", err)
			}
			if got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestConditionErrors(t *testing.T) {
	ctx := context.Background()
	env := testEnv()
	compileErrs := []struct {
		src string
		is  error
	}{
		{`1 + 2`, ErrNotBool},
		{`"prod"`, ErrNotBool},
		{``, ErrSyntax},
		{`   `, ErrSyntax},
		{`"<+pipeline.variables.env>" == "prod"`, ErrSyntax},
		{`<+input> == "x"`, ErrRuntimeInput},
		{`<+env.name == "x"`, ErrSyntax},
		{`<+env.name> == `, ErrSyntax},
	}
	for _, tc := range compileErrs {
		_, err := CompileCondition(tc.src)
		if !errors.Is(err, tc.is) {
			t.Errorf("CompileCondition(%q) = %v, want %v", tc.src, err, tc.is)
		}
		var te *Error
		if err != nil && !errors.As(err, &te) {
			t.Errorf("CompileCondition(%q) error is not *Error: %v", tc.src, err)
		}
	}

	for _, src := range []string{`<+env.name>`, `<+inputs.count>`, `<+nothing>`} {
		tp, err := CompileCondition(src)
		if err != nil {
			t.Fatalf("CompileCondition(%q): %v", src, err)
		}
		if _, err := tp.Eval(ctx, env); !errors.Is(err, ErrNotBool) {
			t.Errorf("Eval(%q) = %v, want ErrNotBool", src, err)
		}
		if _, err := tp.EvalBool(ctx, env); !errors.Is(err, ErrNotBool) {
			t.Errorf("EvalBool(%q) = %v, want ErrNotBool", src, err)
		}
	}

	// EvalBool of a template requires a bool value too.
	tp, err := Compile("${{ inputs.count }}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.EvalBool(ctx, env); !errors.Is(err, ErrNotBool) {
		t.Errorf("EvalBool = %v, want ErrNotBool", err)
	}
}

func TestEvalString(t *testing.T) {
	ctx := context.Background()
	env := testEnv()
	tests := []struct{ src, want string }{
		{"plain", "plain"},
		{"${{ inputs.count }}", "3"},
		{"${{ steps.update.outputs.prNumber }}", "42"},
		{"${{ inputs.ratio }}", "1.5"},
		{"${{ 1e21 }}", "1e+21"},
		{"${{ 0.000001 }}", "1e-06"},
		{"${{ -0.0 }}", "0"},
		{"${{ inputs.flag }}", "true"},
		{"${{ inputs.tags }}", `["a","b"]`},
		{`${{ {"b": "<tag>", "a": [nil, 1.5, "q\"\n"]} }}`, `{"a":[null,1.5,"q\"\n"],"b":"<tag>"}`},
	}
	for _, tc := range tests {
		tp, err := Compile(tc.src)
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.src, err)
		}
		got, err := tp.EvalString(ctx, env)
		if err != nil {
			t.Fatalf("EvalString(%q): %v", tc.src, err)
		}
		if got != tc.want {
			t.Errorf("EvalString(%q) = %q, want %q", tc.src, got, tc.want)
		}
	}
	tp, err := Compile("${{ nothing }}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.EvalString(ctx, env); !errors.Is(err, ErrNil) {
		t.Errorf("EvalString of nil = %v, want ErrNil", err)
	}
}

func TestContains(t *testing.T) {
	tests := []struct {
		src  string
		want bool
	}{
		{"plain", false},
		{"${{ x }}", true},
		{"<+x>", true},
		{`\${{ x }}`, false},
		{`\\${{ x }}`, true},
		{`\<+a> and <+b>`, true},
		{"a < + b", false},
		{"${{", true}, // unterminated: Compile reports it
		{"}} >", false},
	}
	for _, tc := range tests {
		if got := Contains(tc.src); got != tc.want {
			t.Errorf("Contains(%q) = %v, want %v", tc.src, got, tc.want)
		}
	}
}

func TestRefs(t *testing.T) {
	tests := []struct {
		src  string
		cond bool
		want []string
	}{
		{"plain", false, nil},
		{"v${{ steps.update.outputs.prNumber }}-<+env.name>-${{ env.name }}", false, []string{"steps.update.outputs.prNumber", "env.name"}},
		{"<+pipeline.stages.S.spec.execution.steps.X.updateReleaseRepoOutcome.commitId>", false, []string{"pipeline.stages.S.spec.execution.steps.X.updateReleaseRepoOutcome.commitId"}},
		{`${{ let x = inputs.count; x + inputs.tags[0] }}`, false, []string{"inputs.count", "inputs.tags[0]"}},
		{`${{ filter(inputs.tags, # == cluster.name) }}`, false, []string{"inputs.tags", "cluster.name"}},
		{`${{ pipeline.variables["my-var"].x }}`, false, []string{`pipeline.variables["my-var"].x`}},
		{`${{ steps[inputs.key].outputs }}`, false, []string{"steps", "inputs.key"}},
		{`${{ steps.a.outputs.x ?? steps.b?.outputs.y }}`, false, []string{"steps.a.outputs.x", "steps.b.outputs.y"}},
		{`<+pipeline.variables.csv.split(",")>`, false, []string{"pipeline.variables.csv"}},
		{`<+pipeline.variables.env> == "prod" && <+stage.variables.x> != ""`, true, []string{"pipeline.variables.env", "stage.variables.x"}},
	}
	for _, tc := range tests {
		compile := Compile
		if tc.cond {
			compile = CompileCondition
		}
		tp, err := compile(tc.src)
		if err != nil {
			t.Fatalf("compile(%q): %v", tc.src, err)
		}
		if got := tp.Refs(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Refs(%q) = %q, want %q", tc.src, got, tc.want)
		}
	}
}

func TestWithFunction(t *testing.T) {
	double := func(args ...any) (any, error) {
		n, ok := args[0].(int)
		if !ok {
			return nil, fmt.Errorf("double wants an int, got %T", args[0])
		}
		return 2 * n, nil
	}
	shout := func(args ...any) (any, error) { return fmt.Sprint(args[0]) + "!", nil }
	ctx := context.Background()

	tp, err := Compile("${{ double(inputs.count) }}/${{ upper(env.name) }}", WithFunction("double", double), WithFunction("upper", shout))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tp.Eval(ctx, testEnv())
	if err != nil {
		t.Fatal(err)
	}
	if got != "6/dev!" {
		t.Errorf("got %q, want %q (caller's upper replaces the builtin)", got, "6/dev!")
	}

	tp, err = Compile("${{ double(env.name) }}", WithFunction("double", double))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.Eval(ctx, testEnv()); err == nil || !strings.Contains(err.Error(), "double wants an int") {
		t.Errorf("function error not reported: %v", err)
	}

	// The function is not visible without the option.
	if _, err := Compile("${{ double(1) }}"); !errors.Is(err, ErrSyntax) {
		t.Errorf("unknown function compiled: %v", err)
	}
	for _, name := range []string{"", "a-b", "map", "1x"} {
		if _, err := Compile("x", WithFunction(name, double)); err == nil {
			t.Errorf("WithFunction(%q) accepted", name)
		}
	}
}

func TestContextCancelled(t *testing.T) {
	tp, err := Compile("a ${{ env.name }}")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tp.Eval(ctx, testEnv()); !errors.Is(err, context.Canceled) {
		t.Errorf("Eval with cancelled context = %v, want context.Canceled", err)
	}
	// A literal needs no evaluation.
	lit, err := Compile("plain")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := lit.Eval(ctx, nil); err != nil || v != "plain" {
		t.Errorf("literal Eval = %v, %v", v, err)
	}
}

func TestNilEnv(t *testing.T) {
	tp, err := Compile("${{ env.name }}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tp.Eval(context.Background(), nil)
	if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), `no variable "env" (have: none)`) {
		t.Errorf("got %v", err)
	}
}

func TestConcurrentEval(t *testing.T) {
	tp, err := Compile("v${{ steps.update.outputs.prNumber }}-<+env.name>-${{ join(map(inputs.tags, upper(#)), \",\") }}")
	if err != nil {
		t.Fatal(err)
	}
	env := testEnv()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				got, err := tp.EvalString(context.Background(), env)
				if err != nil || got != "v42-dev-A,B" {
					errs <- fmt.Errorf("got %q, %v", got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The env is only read: evaluation does not modify it.
func TestEnvUnchanged(t *testing.T) {
	env := testEnv()
	before := fmt.Sprint(env)
	for _, src := range []string{
		`${{ uniq(inputs.tags) }}`, `${{ concat(inputs.tags, ["c"]) }}`, `${{ sort(inputs.tags, "desc") }}`,
		`${{ reverse(inputs.tags) }}`, `<+pipeline.variables.name.trim()>`,
	} {
		tp, err := Compile(src)
		if err != nil {
			t.Fatalf("Compile(%q): %v", src, err)
		}
		if _, err := tp.Eval(context.Background(), env); err != nil {
			t.Fatalf("Eval(%q): %v", src, err)
		}
	}
	if after := fmt.Sprint(env); after != before {
		t.Errorf("env changed:\n%s\n%s", before, after)
	}
}

// Unescape agrees with Compile+Eval on every string without a live expression and leaves
// strings with one alone.
func TestUnescape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`\<+x>`, "<+x>"},
		{`\${{ x }}`, "${{ x }}"},
		{`a \<+x> b \${{ y }} c`, "a <+x> b ${{ y }} c"},
		{`\\\<+x>`, `\<+x>`},
		{`\\\\\${{ x }}`, `\\${{ x }}`},
		{`C:\dir\<`, `C:\dir\<`},
		{`no delimiters`, `no delimiters`},
		{``, ``},
		{`\<+x> and <+y>`, `\<+x> and <+y>`}, // live: compile it instead
		{`\\<+y>`, `\\<+y>`},                 // the even run leaves <+y> live
	} {
		if got := Unescape(tc.in); got != tc.want {
			t.Errorf("Unescape(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if Contains(tc.in) {
			continue
		}
		tm, err := Compile(tc.in)
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.in, err)
		}
		v, err := tm.Eval(context.Background(), nil)
		if err != nil || v != tc.want {
			t.Errorf("Compile(%q).Eval = %q, %v; Unescape disagrees", tc.in, v, err)
		}
	}
}
