package template

import (
	"context"
	"fmt"
	"testing"
)

// benchEval compiles src and times eval of it against testEnv; an error from eval fails the
// benchmark.
func benchEval(b *testing.B, compile func(string, ...Option) (*Template, error), src string, eval func(context.Context, *Template, map[string]any) error) {
	b.Helper()
	tp, err := compile(src)
	if err != nil {
		b.Fatal(err)
	}
	env := testEnv()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := eval(ctx, tp, env); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEvalMixed(b *testing.B) {
	benchEval(b, Compile, "apps/<+env.name>/<+cluster.name>/values-${{ steps.update.outputs.prNumber }}.yaml", func(ctx context.Context, tp *Template, env map[string]any) error {
		s, err := tp.EvalString(ctx, env)
		if err != nil || s != "apps/dev/east/values-42.yaml" {
			return fmt.Errorf("got %q, %v", s, err)
		}
		return nil
	})
}

func BenchmarkEvalCondition(b *testing.B) {
	benchEval(b, CompileCondition, `<+pipeline.variables.env> == "prod" && <+stage.variables.x> != ""`, func(ctx context.Context, tp *Template, env map[string]any) error {
		ok, err := tp.EvalBool(ctx, env)
		if err != nil || !ok {
			return fmt.Errorf("got %v, %v", ok, err)
		}
		return nil
	})
}

func BenchmarkEvalWhole(b *testing.B) {
	benchEval(b, Compile, "<+pipeline.stages.S.spec.execution.steps.X.updateReleaseRepoOutcome.commitId>", func(ctx context.Context, tp *Template, env map[string]any) error {
		_, err := tp.Eval(ctx, env)
		return err
	})
}

func BenchmarkCompileMixed(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile("apps/<+env.name>/<+cluster.name>/values-${{ steps.update.outputs.prNumber }}.yaml"); err != nil {
			b.Fatal(err)
		}
	}
}
