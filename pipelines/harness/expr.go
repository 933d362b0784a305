package harness

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/prflow/prflow/steps/template"
)

// Harness step paths: <+pipeline.stages.S.spec.execution.steps.G.steps.X.mergePROutcome.commitId>
// and the stage-relative <+execution.steps.X.…>. Step groups are flattened to G_X, so the
// group chain becomes part of the native step id.
var stepPathRE = regexp.MustCompile(`(?:pipeline\.stages\.([A-Za-z_][A-Za-z0-9_]*)\.spec\.)?execution\.(?:steps|rollbackSteps)\.((?:[A-Za-z_][A-Za-z0-9_]*\.steps\.)*)([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?(\.outputVariables)?`)

// Simple renames of Harness roots to native ones.
var renames = []struct {
	re *regexp.Regexp
	to string
}{
	{regexp.MustCompile(`\bpipeline\.stages\.([A-Za-z_][A-Za-z0-9_]*)\.status\b`), "stages.$1.status"},
	{regexp.MustCompile(`\bpipeline\.executionId\b`), "run.id"},
	{regexp.MustCompile(`\bpipeline\.sequenceId\b`), "run.id"},
	{regexp.MustCompile(`\bpipeline\.triggeredBy\.name\b`), "run.executor"},
	{regexp.MustCompile(`\bpipeline\.identifier\b`), "pipeline.name"},
	{regexp.MustCompile(`\bstage\.identifier\b`), "stage.id"},
	{regexp.MustCompile(`\bservice\.identifier\b`), "service.name"},
	{regexp.MustCompile(`\benv\.identifier\b`), "env.name"},
	{regexp.MustCompile(`\bcluster\.identifier\b`), "cluster.name"},
}

// nativeRoots are the expression roots prflow's environment has (pipelines/env.go).
var nativeRoots = map[string]bool{"inputs": true, "variables": true, "pipeline": true, "stage": true, "steps": true,
	"stages": true, "env": true, "envgroup": true, "cluster": true, "clusters": true, "run": true, "service": true}

// nativeKeys are the fields of the native roots that have a fixed set (pipelines/env.go).
var nativeKeys = map[string][]string{
	"pipeline": {"name", "variables"},
	"stage":    {"id", "name", "status", "variables", "startedAt", "startedAtUnix"},
	"env":      {"name", "group"},
	"envgroup": {"name"},
	"cluster":  {"name", "agent"},
	"service":  {"name"},
	"run":      {"id", "executor", "pipeline"},
}

// rewriteExpr turns the Harness paths in s into native ones. It returns the problems found
// (references prflow cannot resolve), each a message.
func rewriteExpr(s string) (string, []string) {
	if !template.Contains(s) {
		return s, nil
	}
	var probs []string
	// A step path prflow cannot read is one problem: it is reported once, with the whole
	// reference, and not again as an unknown root below.
	type bad struct{ m, step, why string }
	var bads []bad
	out := stepPathRE.ReplaceAllStringFunc(s, func(m string) string {
		g := stepPathRE.FindStringSubmatch(m)
		stage, chain, step, tail, ov := g[1], g[2], g[3], g[4], g[5]
		id := strings.ReplaceAll(chain, ".steps.", "_") + step
		prefix := "steps." + id
		if stage != "" {
			prefix = "stages." + stage + ".steps." + id
		}
		switch {
		case tail == "":
			return prefix
		case strings.HasSuffix(tail, "Outcome") || tail == "GITOPS_LINKED_APPS_OUTCOME":
			return prefix + ".outputs"
		case tail == "output" && ov != "":
			return prefix + ".outputs"
		case tail == "status":
			return prefix + ".status"
		case tail == "spec":
			bads = append(bads, bad{m, step, fmt.Sprintf("reads step %s's inputs (spec): prflow cannot read a step's inputs; read its outputs (such as <+execution.steps.%s.updateReleaseRepoOutcome.commitId>) or put the value in a pipeline variable both steps use", step, step)})
			return m
		}
		bads = append(bads, bad{m, step, fmt.Sprintf("unknown step field %q (use an outcome such as updateReleaseRepoOutcome, or status)", tail)})
		return m
	})
	for _, r := range renames {
		out = r.re.ReplaceAllString(out, r.to)
	}
	t, err := template.Compile(out)
	if err != nil {
		for _, b := range bads {
			probs = append(probs, "<+"+b.m+">: "+b.why)
		}
		return out, append(probs, err.Error())
	}
	said := map[string]bool{}
refs:
	for _, ref := range t.Refs() {
		for _, b := range bads {
			if ref == b.m || strings.HasPrefix(ref, b.m+".") {
				if !said[b.m] {
					said[b.m] = true
					probs = append(probs, "<+"+ref+"> "+b.why)
				}
				continue refs
			}
		}
		parts := strings.Split(ref, ".")
		root := parts[0]
		if !nativeRoots[root] {
			probs = append(probs, fmt.Sprintf("<+%s>: %q expressions are not supported (prflow has %s)", ref, root, "pipeline, stage, execution.steps, env, cluster, service, matrix, strategy"))
			continue
		}
		if keys, ok := nativeKeys[root]; ok && len(parts) > 1 && !contains(keys, parts[1]) {
			probs = append(probs, fmt.Sprintf("<+%s>: prflow has no %s.%s (it has %s.%s)", ref, root, parts[1], root, strings.Join(keys, ", "+root+".")))
		}
	}
	for _, b := range bads {
		if !said[b.m] {
			probs = append(probs, "<+"+b.m+"> "+b.why)
		}
	}
	return out, probs
}

// runtimeInput is a parsed `<+input>` marker with its methods.
type runtimeInput struct {
	def     *string
	allowed []string
	probs   []string
}

var inputRE = regexp.MustCompile(`^\s*<\+input>((?:\.[A-Za-z]+\((?:[^()"']|"[^"]*"|'[^']*')*\))*)\s*$`)
var inputMethodRE = regexp.MustCompile(`\.([A-Za-z]+)\(((?:[^()"']|"[^"]*"|'[^']*')*)\)`)

// parseInput reports whether s is a runtime input marker and parses it.
func parseInput(s string) (*runtimeInput, bool) {
	if !strings.Contains(s, "<+input>") {
		return nil, false
	}
	m := inputRE.FindStringSubmatch(s)
	if m == nil {
		return &runtimeInput{probs: []string{"<+input> must be the whole value (with .default(x) / .allowedValues(a,b))"}}, true
	}
	in := &runtimeInput{}
	for _, mm := range inputMethodRE.FindAllStringSubmatch(m[1], -1) {
		args := splitArgs(mm[2])
		switch mm[1] {
		case "default":
			if len(args) != 1 {
				in.probs = append(in.probs, "<+input>.default() takes one value")
				continue
			}
			in.def = &args[0]
		case "allowedValues":
			in.allowed = args
		case "executionInput":
			in.probs = append(in.probs, "<+input>.executionInput() (asking during the run) is not supported; give the value with --set")
		default:
			in.probs = append(in.probs, fmt.Sprintf("<+input>.%s() is not supported (only .default and .allowedValues)", mm[1]))
		}
	}
	return in, true
}

func splitArgs(s string) []string {
	var out []string
	var cur strings.Builder
	quote := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '"' || c == '\'':
			quote = c
		case c == ',':
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	if strings.TrimSpace(cur.String()) != "" || len(out) > 0 {
		out = append(out, strings.TrimSpace(cur.String()))
	}
	return out
}

// substMatrix replaces <+matrix.k>, <+strategy.iteration> and <+strategy.iterations> for one
// matrix combination. A string that is exactly one such expression becomes the value itself;
// inside larger expressions the name is replaced by a quoted literal.
func substMatrix(s string, combo map[string]string, iter, total int) string {
	if !strings.Contains(s, "matrix.") && !strings.Contains(s, "strategy.") {
		return s
	}
	vals := map[string]string{"strategy.iteration": strconv.Itoa(iter), "strategy.iterations": strconv.Itoa(total)}
	for k, v := range combo {
		vals["matrix."+k] = v
	}
	for k, v := range vals {
		// <+<+matrix.k>.split(",")>: the inner one is an operand, so it becomes a literal.
		s = strings.ReplaceAll(s, "<+<+"+k+">", "<+"+strconv.Quote(v))
		s = strings.ReplaceAll(s, "<+"+k+">", v)
	}
	if !strings.Contains(s, "<+") {
		return s
	}
	for k, v := range vals {
		re := regexp.MustCompile(`\b` + regexp.QuoteMeta(k) + `\b`)
		s = re.ReplaceAllString(s, strconv.Quote(v))
	}
	return s
}
