package environments

import (
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/template"
)

// This file reads what the model needs out of pipelines and runs: which environments a
// pipeline promotes (and where their files and apps are), and what each environment stage of
// a run changed. Nothing here touches NATS; model.go's types are filled in build.go.

// envDecl is one environment as one pipeline declares it.
type envDecl struct {
	name, pipeline string
	order          int      // the stage's position in the pipeline (declaration order without a stage)
	appSet         string   // a FetchLinkedApps applicationSet of its stage
	repo, branch   string   // static UpdateReleaseRepo inputs, when not expressions
	connector      string   // the static UpdateReleaseRepo connector: what the values are read through
	files          []string // the stage's file paths with the environment's name put in
	keys           []string // static variables[].name of its UpdateReleaseRepo steps
	clusters       []pipelines.Cluster
}

// declared lists the environments pipeline p promotes: every stage environment (in stage
// order) and then the environments declared without a stage.
func declared(p *pipelines.Pipeline) []envDecl {
	var out []envDecl
	seen := map[string]int{}
	for i, st := range p.Stages {
		if st.Environment == "" {
			continue
		}
		d := envDecl{name: st.Environment, pipeline: p.Name, order: i}
		if e := p.Env(st.Environment); e != nil {
			d.clusters = e.Clusters
		}
		for _, s := range st.Steps {
			in := s.With.Static()
			switch s.Type {
			case "UpdateReleaseRepo":
				d.repo = cmpOr(d.repo, staticString(in["repo"]))
				d.branch = cmpOr(d.branch, staticString(in["branch"]), staticString(in["baseBranch"]))
				d.connector = cmpOr(d.connector, staticString(in["connector"]))
				for _, k := range variableNames(in) {
					if !slices.Contains(d.keys, k) {
						d.keys = append(d.keys, k)
					}
				}
				for _, f := range filePaths(in) {
					if path := envPath(f, st.Environment); path != "" && !slices.Contains(d.files, path) {
						d.files = append(d.files, path)
					}
				}
			case "FetchLinkedApps":
				d.appSet = cmpOr(d.appSet, staticString(in["applicationSet"]))
			}
		}
		if j, ok := seen[d.name]; ok {
			// Two stages of one pipeline for one environment: one row, the facts of both.
			prev := &out[j]
			prev.appSet, prev.repo, prev.branch = cmpOr(prev.appSet, d.appSet), cmpOr(prev.repo, d.repo), cmpOr(prev.branch, d.branch)
			prev.connector = cmpOr(prev.connector, d.connector)
			for _, k := range d.keys {
				if !slices.Contains(prev.keys, k) {
					prev.keys = append(prev.keys, k)
				}
			}
			for _, f := range d.files {
				if !slices.Contains(prev.files, f) {
					prev.files = append(prev.files, f)
				}
			}
			continue
		}
		seen[d.name] = len(out)
		out = append(out, d)
	}
	for i, e := range p.Environments {
		if _, ok := seen[e.Name]; ok {
			continue
		}
		seen[e.Name] = len(out)
		out = append(out, envDecl{name: e.Name, pipeline: p.Name, order: len(p.Stages) + i, clusters: e.Clusters})
	}
	return out
}

func cmpOr(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// staticString is v when it is a plain string (no expression), else "".
func staticString(v any) string {
	s, _ := v.(string)
	if template.Contains(s) {
		return ""
	}
	return s
}

// filePaths are the path inputs of an UpdateReleaseRepo step (filePath, or filePaths).
func filePaths(in map[string]any) []string {
	var out []string
	if s, ok := in["filePath"].(string); ok {
		out = append(out, s)
	}
	if l, ok := in["filePaths"].([]any); ok {
		for _, x := range l {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// variableNames are the static key names of an UpdateReleaseRepo step's variables.
func variableNames(in map[string]any) []string {
	var out []string
	l, _ := in["variables"].([]any)
	for _, x := range l {
		m, _ := x.(map[string]any)
		if n := staticString(m["name"]); n != "" && !strings.Contains(n, "<+") {
			out = append(out, n)
		}
	}
	return out
}

var envNameRE = regexp.MustCompile(`<\+\s*env\.(name|identifier)\s*>|\$\{\{\s*env\.name\s*\}\}`)

// envPath is a path template with the environment's name put in, or "" when it holds any
// other expression (the model does not guess what it would evaluate to).
func envPath(tmpl, env string) string {
	p := envNameRE.ReplaceAllString(tmpl, env)
	if p == "" || template.Contains(p) || strings.Contains(p, "<+") {
		return ""
	}
	return p
}

// edit is one value an UpdateReleaseRepo step wrote.
type edit struct {
	File, Key string
	Value     any
	Old       any
	HasOld    bool // the step reported the value it replaced (changes[].old)
}

// appRef names an app a stage's FetchLinkedApps found.
type appRef struct{ agent, ref string }

// stageFacts is what one environment stage of a run did.
type stageFacts struct {
	run, pipeline, stage, env string
	executor                  string
	inputs                    map[string]any
	status                    pipelines.Status
	started, ended            time.Time
	repo, branch, pr          string
	edits                     []edit
	already                   bool   // every value was there already: nothing merged
	revision                  string // with already: the commit that held the values
	merged                    string // the merge commit of the stage's PR
	mergedAt                  time.Time
	reverted                  string // the merge commit of the stage's revert (a rollback)
	revertedAt                time.Time
	revertPR                  string
	apps                      []appRef
}

// runFacts reads the environment stages of run r of pipeline p.
func runFacts(r *pipelines.Run, p *pipelines.Pipeline) []stageFacts {
	var out []stageFacts
	for _, sr := range r.Stages {
		st := p.Stage(sr.ID)
		if st == nil || st.Environment == "" {
			continue
		}
		f := stageFacts{run: r.ID, pipeline: r.Pipeline, stage: sr.ID, env: st.Environment, executor: r.Executor, inputs: r.Inputs,
			status: sr.Status, started: sr.Started, ended: sr.Ended}
		for _, s := range sr.Steps {
			if s.Status != pipelines.StSucceeded {
				continue
			}
			o := s.Outputs
			switch s.Type {
			case "UpdateReleaseRepo":
				f.repo, f.branch = cmpOr(str(o["repo"]), f.repo), cmpOr(str(o["baseBranch"]), f.branch)
				f.pr = cmpOr(str(o["prlink"]), f.pr)
				f.edits = append(f.edits, editsOf(o["edits"])...)
				if a, _ := o["alreadyPromoted"].(bool); a {
					f.already, f.revision = true, str(o["revision"])
				}
				if m := str(o["mergeCommitId"]); m != "" { // waitForMerge: a person merged it
					f.merged, f.mergedAt = m, s.Ended
				}
			case "MergePR":
				if a, _ := o["alreadyPromoted"].(bool); a {
					f.already, f.revision = true, cmpOr(f.revision, str(o["revision"]))
				}
				if m := str(o["commitId"]); m != "" {
					f.merged, f.mergedAt = m, s.Ended
					f.pr = cmpOr(f.pr, str(o["prlink"]))
				}
			case "FetchLinkedApps":
				f.apps = appsOf(o["apps"])
			}
		}
		for _, s := range sr.Rollback {
			if s.Status != pipelines.StSucceeded {
				continue
			}
			switch s.Type {
			case "RevertPR":
				f.revertPR = str(s.Outputs["prlink"])
			case "MergePR":
				if m := str(s.Outputs["commitId"]); m != "" && f.merged != "" {
					f.reverted, f.revertedAt = m, s.Ended
				}
			}
		}
		out = append(out, f)
	}
	return out
}

// str is v when it is a string; anything else (a malformed output) is no value.
func str(v any) string {
	s, _ := v.(string)
	return s
}

// editsOf reads the edits output (steps.EditedKeys) and the replaced values some versions
// of the step report next to each change (changes[].old).
func editsOf(v any) []edit {
	keys := steps.EditedKeys(v)
	out := make([]edit, 0, len(keys))
	olds := map[[2]string]any{}
	list, _ := v.([]any)
	for _, fv := range list {
		fm, _ := fv.(map[string]any)
		file, _ := fm["file"].(string)
		chs, _ := fm["changes"].([]any)
		for _, c := range chs {
			cm, _ := c.(map[string]any)
			key, _ := cm["key"].(string)
			if old, ok := cm["old"]; ok {
				olds[[2]string{file, key}] = old
			}
		}
	}
	for _, k := range keys {
		e := edit{File: k.File, Key: k.Key, Value: k.Value}
		e.Old, e.HasOld = olds[[2]string{k.File, k.Key}]
		out = append(out, e)
	}
	return out
}

func appsOf(v any) []appRef {
	list, _ := v.([]any)
	var out []appRef
	for _, x := range list {
		m, _ := x.(map[string]any)
		name, agentID := str(m["name"]), str(m["agent"])
		if name == "" || agentID == "" {
			continue
		}
		if ns := str(m["appNamespace"]); ns != "" {
			name = ns + "/" + name
		}
		out = append(out, appRef{agent: agentID, ref: name})
	}
	return out
}
