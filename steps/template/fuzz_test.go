package template

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

const fuzzEnvJSON = `{"env":{"name":"dev"},"steps":{"update":{"outputs":{"prNumber":42,"commitId":"abc"}}},` +
	`"inputs":{"tags":["a","b"],"n":3,"nested":[[1,2],[3,[4]]]},"pipeline":{"variables":{"csv":"a,b,c","x":null}}}`

func FuzzCompileEval(f *testing.F) {
	seeds := []string{
		"plain", "", "${{ env.name }}", "<+env.name>", "v${{ steps.update.outputs.prNumber }}-<+env.name>",
		`\${{ x }}`, `\\<+env.name>`, `${{ "}}" }}`, `<+ "a>b" >`, `<+ (2 > 1) >`, `<+<+pipeline.variables.csv>.split(",")>`,
		`${{ steps.update.outputs.nope ?? 1 }}`, `${{ steps.nope?.outputs }}`, `<+pipeline.variables.csv.substring(1, 3)>`,
		`<+pipeline.variables.csv.replace(",", ";").toUpperCase().length()>`, `${{ map(1..5, # * 2) }}`,
		`${{ filter(inputs.tags, # != "a") }}`, `${{ let a = [1]; let b = [a, a]; [b, b] }}`, `${{ toJSON(inputs) }}`,
		`<+pipeline.variables.env> == "prod" && <+stage.variables.x> != ""`, `<+input>`, `${{ 1 +`, `<+`, `${{`,
		`${{ inputs.nested[1][1][0] }}`, `${{ uniq(flatten(inputs.nested)) }}`, `${{ repeat("x", 10) + "y" }}`,
		`${{ max(inputs.nested) }}`, `${{ {"a": inputs, "b": [inputs]} == {"a": inputs, "b": [inputs]} }}`,
		`${{ inputs in [inputs] }}`, `${{ reduce(1..10, #acc + #acc, "x") }}`, `${{ nope?.a?.b?.trim() ?? "z" }}`,
	}
	for _, s := range seeds {
		f.Add(s, fuzzEnvJSON)
	}
	f.Add(`${{ a.b }}`, `{"a":{"b":{"c":[1,2,3]}}}`)
	f.Add(`<+a.b.length()>`, `{"a":{"b":"héllo"}}`)
	f.Add(`${{ a }}`, `not json`)

	f.Fuzz(func(t *testing.T, src, envJSON string) {
		var env map[string]any
		if err := json.Unmarshal([]byte(envJSON), &env); err != nil {
			_ = json.Unmarshal([]byte(fuzzEnvJSON), &env)
		}
		ctx := context.Background()
		opts := []Option{WithMemoryBudget(1e5), WithMaxNodes(2000)}
		for _, cond := range []bool{false, true} {
			var tp *Template
			var err error
			if cond {
				tp, err = CompileCondition(src, opts...)
			} else {
				tp, err = Compile(src, opts...)
			}
			if err != nil {
				checkError(t, src, err)
				continue
			}
			if !cond && tp.Literal() == Contains(src) {
				t.Fatalf("Literal() = %v but Contains = %v for %q", tp.Literal(), Contains(src), src)
			}
			v, err := tp.Eval(ctx, env)
			if err != nil {
				checkError(t, src, err)
			} else {
				if tp.Literal() {
					if _, ok := v.(string); !ok {
						t.Fatalf("literal %q evaluated to %T", src, v)
					}
				}
				if cond {
					if _, ok := v.(bool); !ok {
						t.Fatalf("condition %q evaluated to %T without error", src, v)
					}
				}
			}
			if _, err := tp.EvalString(ctx, env); err != nil {
				checkError(t, src, err)
			}
			if _, err := tp.EvalBool(ctx, env); err != nil {
				checkError(t, src, err)
			}
			_ = tp.Refs()
		}
	})
}

// checkError asserts that a failure is a positioned *Error inside src.
func checkError(t *testing.T, src string, err error) {
	t.Helper()
	var te *Error
	if !errors.As(err, &te) {
		t.Fatalf("error for %q is not *Error: %v", src, err)
	}
	if te.Offset < 0 || te.Offset > len(src) || te.Pos < 0 || te.Pos > len(src) {
		t.Fatalf("error for %q has Offset %d Pos %d outside the source: %v", src, te.Offset, te.Pos, err)
	}
	if te.Err == nil || te.Error() == "" {
		t.Fatalf("error for %q has no cause", src)
	}
}
