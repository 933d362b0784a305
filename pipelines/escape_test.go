package pipelines

import (
	"testing"

	"github.com/prflow/prflow/steps"
)

// Issue 13: the documented escapes \<+x> and \${{ x }} give the literal delimiter whether or
// not the string also holds a live expression.
func TestEscapedDelimitersInPipelineValues(t *testing.T) {
	src := `
name: esc
variables:
  harnessAlone: '\<+x>'
  nativeAlone: '\${{ x }}'
  harnessMixed: '\<+x> is <+pipeline.name>'
  nativeMixed: '\${{ x }} is ${{ pipeline.name }}'
  doubled: '\\<+pipeline.name>'
  inText: 'use \<+pipeline.name> to read it'
  backslashKept: 'C:\dir'
stages:
  - id: s
    steps:
      - {id: w, type: Approval, with: {approvers: [a]}}
`
	p, err := Load("esc.yaml", []byte(src), steps.Default)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	for _, v := range p.Variables {
		if m[v.Name], err = evalValue(v.Value, map[string]any{"pipeline": map[string]any{"name": "s"}}); err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
	}
	for k, want := range map[string]string{
		"harnessAlone":  "<+x>",
		"nativeAlone":   "${{ x }}",
		"harnessMixed":  "<+x> is s",
		"nativeMixed":   "${{ x }} is s",
		"doubled":       `\s`,
		"inText":        "use <+pipeline.name> to read it",
		"backslashKept": `C:\dir`,
	} {
		if m[k] != want {
			t.Errorf("%s = %q, want %q", k, m[k], want)
		}
	}
}
