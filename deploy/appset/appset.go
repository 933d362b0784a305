// Package appset evaluates Argo CD ApplicationSet generators (list, git files, git
// directories) and renders the ApplicationSet's template once per parameter set, the way Argo
// CD's ApplicationSet controller does (v3.2: fasttemplate `{{ key }}` placeholders by default,
// Go text/template with goTemplate).
//
// It is said once here so that the fake Argo CD (deploy/argocdtest), the simulated agent
// (deploy/simagent) and any later prflow-side reading of an ApplicationSet generate the same
// apps from the same release repo. Git is read through Repo, so each caller brings its own
// way of reading a repository at a revision.
package appset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrUnsupported: a generator kind this package does not evaluate (clusters, matrix, …).
var ErrUnsupported = errors.New("only list and git generators are supported")

// Repo reads a git repository at a revision.
type Repo interface {
	// Resolve turns revision ("" for HEAD, a branch, tag or SHA) of repoURL into a commit SHA.
	// Its error is returned as it is, so it should name the repo and revision.
	Resolve(ctx context.Context, repoURL, revision string) (string, error)
	// ReadTree returns the files below dir ("" for the root) at commit sha, keyed by path
	// relative to dir. A dir that does not exist has no files (nil map, nil error).
	ReadTree(ctx context.Context, repoURL, sha, dir string) (map[string][]byte, error)
}

// Spec is what generation needs of an ApplicationSet's spec; its JSON is the spec's, so an
// ApplicationSet's spec decodes into it.
type Spec struct {
	Name              string          `json:"-"` // the ApplicationSet's name, for messages
	GoTemplate        bool            `json:"goTemplate,omitempty"`
	GoTemplateOptions []string        `json:"goTemplateOptions,omitempty"`
	Generators        []Generator     `json:"generators"`
	Template          json.RawMessage `json:"template"`
}

// Generator is one entry of spec.generators; other kinds than list and git leave both nil.
type Generator struct {
	List *List `json:"list,omitempty"`
	Git  *Git  `json:"git,omitempty"`
}

// List is the list generator: one parameter set per element.
type List struct {
	Elements []json.RawMessage `json:"elements"`
	Template json.RawMessage   `json:"template,omitempty"` // overlaid on spec.template
}

// Git is the git files or directories generator.
type Git struct {
	RepoURL         string            `json:"repoURL"`
	Revision        string            `json:"revision"`
	Files           []PathItem        `json:"files,omitempty"`
	Directories     []PathItem        `json:"directories,omitempty"`
	PathParamPrefix string            `json:"pathParamPrefix,omitempty"`
	Values          map[string]string `json:"values,omitempty"`
	Template        json.RawMessage   `json:"template,omitempty"` // overlaid on spec.template
}

// PathItem is one files or directories entry: a git pathspec glob, included or excluded.
type PathItem struct {
	Path    string `json:"path"`
	Exclude bool   `json:"exclude,omitempty"`
}

// Params is one parameter set: flat string values (`cluster.name`) by default, nested values
// with goTemplate.
type Params map[string]any

// App is one Application the ApplicationSet generates.
type App struct {
	Name     string          // the rendered metadata.name
	Template json.RawMessage // the rendered template: {"metadata": …, "spec": …}
	// File and Config are the config file a git files generator made the app from, and the
	// object of that file the app's parameters came from ("" and nil for other generators).
	File   string
	Config map[string]any
}

// paramSet is one generator result with where it came from.
type paramSet struct {
	params Params
	file   string
	config map[string]any
}

// Generate runs every generator of spec and renders spec's template (overlaid with the
// generator's own) once per parameter set. Errors name the generator, and the file for a git
// files generator; an app name that is empty or generated twice is an error, as in Argo CD.
func Generate(ctx context.Context, repo Repo, spec Spec) ([]App, error) {
	var out []App
	seen := map[string]string{} // app name → the file it came from
	for i, g := range spec.Generators {
		var sets []paramSet
		var over json.RawMessage
		var err error
		switch {
		case g.List != nil:
			sets, err = listParams(g.List, spec.GoTemplate)
			over = g.List.Template
		case g.Git != nil:
			sets, err = gitParams(ctx, repo, g.Git, spec.GoTemplate)
			over = g.Git.Template
		default:
			err = ErrUnsupported
		}
		if err != nil {
			return nil, fmt.Errorf("generator %d: %w", i, err)
		}
		tmpl, err := MergeTemplate(spec.Template, over)
		if err != nil {
			return nil, fmt.Errorf("generator %d: %w", i, err)
		}
		for _, p := range sets {
			rendered, err := Render(tmpl, p.params, spec.GoTemplate, spec.GoTemplateOptions)
			if err != nil {
				return nil, fmt.Errorf("generator %d: %srendering template: %w", i, fileNote(p.file), err)
			}
			var meta struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(rendered, &meta); err != nil {
				return nil, fmt.Errorf("generator %d: %srendered template: %w", i, fileNote(p.file), err)
			}
			name := meta.Metadata.Name
			if name == "" {
				return nil, fmt.Errorf("generator %d: %sthe rendered template has no metadata.name", i, fileNote(p.file))
			}
			if prev, dup := seen[name]; dup {
				from := ""
				if prev != "" && p.file != "" {
					from = fmt.Sprintf(" (config files %s and %s)", prev, p.file)
				}
				return nil, fmt.Errorf("generator %d: ApplicationSet %s contains applications with duplicate name: %s%s", i, spec.Name, name, from)
			}
			seen[name] = p.file
			out = append(out, App{Name: name, Template: rendered, File: p.file, Config: p.config})
		}
	}
	return out, nil
}

func fileNote(file string) string {
	if file == "" {
		return ""
	}
	return "config file " + file + ": "
}

func listParams(g *List, goTemplate bool) ([]paramSet, error) {
	var out []paramSet
	for i, raw := range g.Elements {
		var el map[string]any
		if err := json.Unmarshal(raw, &el); err != nil {
			return nil, fmt.Errorf("list element %d is not an object: %w", i, err)
		}
		if goTemplate {
			out = append(out, paramSet{params: el})
			continue
		}
		p := Params{}
		for k, v := range el {
			if k == "values" {
				vals, ok := v.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("list element %d: values must be an object", i)
				}
				for vk, vv := range vals {
					p["values."+vk] = fmt.Sprintf("%v", vv)
				}
				continue
			}
			sv, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("list element %d: error parsing value of %q as string", i, k)
			}
			p[k] = sv
		}
		out = append(out, paramSet{params: p})
	}
	return out, nil
}
