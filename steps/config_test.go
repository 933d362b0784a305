package steps

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// sampleValue is a literal of a declared input that is valid and differs from its default.
func sampleValue(in Input) any {
	switch in.Type {
	case InputString:
		if len(in.Enum) > 0 {
			return in.Enum[len(in.Enum)-1]
		}
		return "sample"
	case InputBool:
		return in.Default != true
	case InputInt:
		return 2
	case InputDuration:
		return "7m"
	case InputStrings:
		return []any{"a=1", "b=2"}
	case InputMap:
		return map[string]any{"k": "v"}
	case InputObject:
		m := map[string]any{}
		for _, f := range in.Fields {
			m[f.Name] = sampleValue(f)
		}
		return m
	case InputList:
		return []any{sampleValue(*in.Items)}
	}
	return "anything"
}

// sampleFor is sampleValue, or a hand-written sample where the declaration cannot say what is
// valid: a Verify metric takes count or duration, not both, and its failOnNoAnalysis a closed
// set of words the schema leaves open (it also takes true and false).
func sampleFor(typ string, in Input) any {
	if typ == TypeVerify && in.Name == "metrics" {
		return []any{map[string]any{"name": "errors", "provider": "prom", "query": "up", "count": 2,
			"successCondition": "result < 1", "failOnNoAnalysis": "fail"}}
	}
	return sampleValue(in)
}

// TestConfigRoundTrip: for every step type with a config struct, each declared input (derived
// from the struct) decodes into the struct and lands in a field: the declaration a pipeline is
// checked against and what the step reads are one thing.
func TestConfigRoundTrip(t *testing.T) {
	n := 0
	for _, typ := range Default.Types() {
		d, _ := Default.Lookup(typ)
		if d.Config == nil {
			continue
		}
		n++
		ct := reflect.TypeOf(d.Config)
		decode := func(in map[string]any) (reflect.Value, error) {
			v := reflect.New(ct).Elem()
			return v, decodeStruct(v, in, "", false)
		}
		base := map[string]any{}
		for _, in := range d.Inputs {
			if in.Required {
				base[in.Name] = sampleFor(typ, in)
			}
		}
		zero, err := decode(base)
		if err != nil {
			t.Fatalf("%s: the required inputs alone: %v", typ, err)
		}
		if !reflect.DeepEqual(inputsOfType(ct), d.Inputs) {
			t.Errorf("%s: registered inputs differ from the struct's", typ)
		}
		for _, in := range d.Inputs {
			if in.Required {
				continue
			}
			with := map[string]any{in.Name: sampleFor(typ, in)}
			for k, v := range base {
				with[k] = v
			}
			got, err := decode(with)
			if err != nil {
				t.Errorf("%s: declared input %s = %v does not decode: %v", typ, in.Name, with[in.Name], err)
				continue
			}
			if reflect.DeepEqual(got.Interface(), zero.Interface()) {
				t.Errorf("%s: declared input %s is read into no field", typ, in.Name)
			}
		}
	}
	if n < 8 {
		t.Errorf("only %d step types have a config struct", n)
	}
}

// TestDecodeRefusesUnknownField: a key the config does not declare is an error naming it, at
// the top, inside an object and inside a list entry, at load and at run time.
func TestDecodeRefusesUnknownField(t *testing.T) {
	for _, c := range []struct {
		in   map[string]any
		want string
	}{
		{map[string]any{"waitTillHealty": true}, "waitTillHealty: unknown input (known: "},
		{map[string]any{"retryStrategy": map[string]any{"limit": 1, "maxBackof": "1m"}}, "retryStrategy.maxBackof: unknown input"},
		{map[string]any{"applicationsList": []any{map[string]any{"aplicationName": "web", "agentId": "eu"}}}, "applicationsList[0].aplicationName: unknown input"},
		{map[string]any{"syncOptions": map[string]any{"prune": true}}, "syncOptions.prune: unknown option"},
	} {
		for _, static := range []bool{true, false} {
			_, err := syncConfigFrom(c.in, static)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("static %v, %v: err = %v, want %q", static, c.in, err, c.want)
			}
		}
	}
	// The step refuses it when it runs (a job built from an older pipeline version).
	if _, err := runGitOpsSync(t.Context(), &Context{Inputs: map[string]any{"aplicationsList": []any{}}}); err == nil ||
		!IsTerminal(err) || !strings.Contains(err.Error(), "aplicationsList: unknown input") {
		t.Errorf("run: %v", err)
	}
	// And pipeline load does, through the registered Validate.
	d, _ := Default.Lookup("MergePR")
	if err := d.Validate(map[string]any{"mergeStrategy": "merge", "delteSourceBranch": true}); err == nil || !strings.Contains(err.Error(), "delteSourceBranch: unknown input") {
		t.Errorf("MergePR validate: %v", err)
	}
}

// TestDecodeShapes: the shapes the loader accepts decode as the hand-written readers did.
func TestDecodeShapes(t *testing.T) {
	c, err := Decode[releaseConfig](map[string]any{"connector": "gh", "repo": 7, "draft": "TRUE", "labels": "a,b",
		"reviewers": []any{"x"}, "baseBranch": "", "variables": []any{map[string]any{"name": "image.tag", "value": "1.10"}},
		"targets": []any{map[string]any{"env": "dev", "cluster": "c1", "filePath": "f.json", "document": map[string]any{"index": 1}}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if c.Repo != "7" || !c.Draft || strings.Join(c.Labels, "|") != "a|b" || c.Reviewers[0] != "x" || c.BaseBranch != "main" {
		t.Errorf("decoded %+v", c)
	}
	if v := c.Variables[0]; v.Value != "1.10" || v.Type != "String" {
		t.Errorf("variable %+v: the text stays as written, type defaults to String", v)
	}
	if tg := c.Targets[0]; tg.Cluster != "c1" || tg.Document.Index == nil || *tg.Document.Index != 1 {
		t.Errorf("target %+v", tg)
	}
	l, err := Decode[linkedConfig](map[string]any{"appWaitTimeout": "1d", "agentOutageTimeout": "0"}, false)
	if err != nil || l.AppWaitTimeout != 24*time.Hour || l.outageTimeout() != defaultOutageTimeout {
		t.Errorf("durations: %v %v %v", l.AppWaitTimeout, l.outageTimeout(), err)
	}
	for _, bad := range []struct {
		in   map[string]any
		want string
	}{
		{map[string]any{"connector": "gh", "repo": "r", "draft": "yes"}, "draft: want true or false, got yes"},
		{map[string]any{"connector": "gh", "repo": "r", "labels": []any{"a", 3}}, "labels[1]: want a string, got int"},
		{map[string]any{"connector": "gh", "repo": "r", "variables": []any{"image.tag"}}, "variables[0]: want a mapping {name, type, value, create, document}, got string"},
		{map[string]any{"connector": "gh", "repo": "r", "variables": []any{map[string]any{"value": 1}}}, "variables[0].name: required"},
		{map[string]any{"connector": "gh", "repo": "r", "document": map[string]any{"index": -1}}, "document.index: -1 is negative"},
		{map[string]any{"repo": "r"}, "connector: required"},
	} {
		if _, err := Decode[releaseConfig](bad.in, false); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: err = %v, want %q", bad.in, err, bad.want)
		}
	}
	// An expression is left for run time at load; a string keeps its text meanwhile.
	r, err := Decode[revertConfig](map[string]any{"commitId": "${{ steps.merge.outputs.commitId }}", "mainline": "<+x>"}, true)
	if err != nil || r.CommitID != "${{ steps.merge.outputs.commitId }}" || r.Mainline != 1 {
		t.Errorf("static: %+v %v", r, err)
	}
}

// TestConfigDefaults: tag defaults that repeat a Go constant agree with it.
func TestConfigDefaults(t *testing.T) {
	def := func(typ, name string) any {
		d, _ := Default.Lookup(typ)
		in, ok := d.Input(name)
		if !ok {
			t.Fatalf("%s declares no %s", typ, name)
		}
		return in.Default
	}
	if got := def(TypeDiffPreview, "maxCommentBytes"); got != defaultMaxCommentBytes {
		t.Errorf("maxCommentBytes default %v, const %v", got, defaultMaxCommentBytes)
	}
	if got := def("GitOpsSync", "syncWindow"); got != syncWindowWait {
		t.Errorf("syncWindow default %v", got)
	}
	if got, _ := def("FetchLinkedApps", "appWaitTimeout").(string); got == "" {
		t.Error("appWaitTimeout: no default")
	} else if d, err := durationInput(got); err != nil || d != linkedDefaultWait {
		t.Errorf("appWaitTimeout default %v, const %v", got, linkedDefaultWait)
	}
}
