package template

import (
	"context"
	"testing"
)

func BenchmarkEvalMixed(b *testing.B) {
	tp, err := Compile("apps/<+env.name>/<+cluster.name>/values-${{ steps.update.outputs.prNumber }}.yaml")
	if err != nil {
		b.Fatal(err)
	}
	env := testEnv()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s, err := tp.EvalString(ctx, env)
		if err != nil || s != "apps/dev/east/values-42.yaml" {
			b.Fatalf("got %q, %v", s, err)
		}
	}
}

func BenchmarkEvalCondition(b *testing.B) {
	tp, err := CompileCondition(`<+pipeline.variables.env> == "prod" && <+stage.variables.x> != ""`)
	if err != nil {
		b.Fatal(err)
	}
	env := testEnv()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ok, err := tp.EvalBool(ctx, env)
		if err != nil || !ok {
			b.Fatalf("got %v, %v", ok, err)
		}
	}
}

func BenchmarkEvalWhole(b *testing.B) {
	tp, err := Compile("<+pipeline.stages.S.spec.execution.steps.X.updateReleaseRepoOutcome.commitId>")
	if err != nil {
		b.Fatal(err)
	}
	env := testEnv()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tp.Eval(ctx, env); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompileMixed(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile("apps/<+env.name>/<+cluster.name>/values-${{ steps.update.outputs.prNumber }}.yaml"); err != nil {
			b.Fatal(err)
		}
	}
}
