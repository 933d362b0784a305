package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/rbac"
)

// ErrUnknownPipeline is a start by name of a pipeline the catalog does not have.
var ErrUnknownPipeline = errors.New("unknown pipeline")

// PipelineInfo is one pipeline of the catalog (GET /api/v1/pipelines): what a promote form
// needs to start a run of it.
type PipelineInfo struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	File        string `json:"file,omitempty"`
	// Spec is the hash of the source a start by name runs; From says where it comes from:
	// "server" (the server's --pipelines directory) or "run <id>" (the newest run of it).
	Spec         string      `json:"spec"`
	From         string      `json:"from"`
	Inputs       []InputInfo `json:"inputs"`
	Environments []string    `json:"environments"`
	Stages       []string    `json:"stages"`
}

// InputInfo is a typed runtime input.
type InputInfo struct {
	Name        string `json:"name"`
	Type        string `json:"type"` // string, number, boolean
	Description string `json:"description,omitempty"`
	Default     any    `json:"default,omitempty"`
	Required    bool   `json:"required,omitempty"`
	Enum        []any  `json:"enum,omitempty"`
}

// catalogEntry is a catalog pipeline with its loaded form.
type catalogEntry struct {
	info PipelineInfo
	p    *pipelines.Pipeline
}

// Catalog lists the pipelines a run can be started of by name, sorted by name: those the
// server loaded (SetTriggers: every file of --pipelines, with triggers or not), then the newest source of every other pipeline name its runs
// show. A name the server loaded is the server's file, whatever runs ran.
func (c *Controller) Catalog(ctx context.Context) ([]PipelineInfo, error) {
	entries, err := c.catalog(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]PipelineInfo, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.info)
	}
	return out, nil
}

func (c *Controller) catalog(ctx context.Context) ([]catalogEntry, error) {
	var out []catalogEntry
	seen := map[string]bool{}
	if ts := c.triggers.Load(); ts != nil {
		list := ts.All
		if list == nil {
			list = ts.Pipelines
		}
		for _, p := range list {
			if !seen[p.Name] {
				seen[p.Name] = true
				out = append(out, catalogEntry{info: describe(p, "server"), p: p})
			}
		}
	}
	if err := c.runsLoaded(ctx); err != nil {
		return nil, err
	}
	// Newest first by creation, from the runs index (nothing decoded).
	c.runs.walk(nil, func(r *RunSummary) bool {
		if seen[r.Pipeline] {
			return true
		}
		p, err := c.Pipeline(ctx, r.Spec)
		if err != nil {
			return true // its source is gone or no longer loads: an older run may still have one
		}
		seen[r.Pipeline] = true
		out = append(out, catalogEntry{info: describe(p, "run "+r.ID), p: p})
		return true
	})
	slices.SortFunc(out, func(a, b catalogEntry) int { return strings.Compare(a.info.Name, b.info.Name) })
	return out, nil
}

// CatalogPipeline returns the catalog's pipeline called name.
func (c *Controller) CatalogPipeline(ctx context.Context, name string) (*pipelines.Pipeline, PipelineInfo, error) {
	entries, err := c.catalog(ctx)
	if err != nil {
		return nil, PipelineInfo{}, err
	}
	var names []string
	for _, e := range entries {
		if e.info.Name == name {
			return e.p, e.info, nil
		}
		names = append(names, e.info.Name)
	}
	known := strings.Join(names, ", ")
	if known == "" {
		known = "none: the server loads no pipelines and no run was started yet"
	}
	return nil, PipelineInfo{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownPipeline, name, known)
}

// StartPipeline starts a run of the catalog's pipeline called name with req.Inputs, as Start
// does (inputs checked, connectors and agents, policies, audit).
func (c *Controller) StartPipeline(ctx context.Context, name string, req StartRequest) (*pipelines.Run, error) {
	p, _, err := c.CatalogPipeline(ctx, name)
	if err != nil {
		return nil, err
	}
	req.File, req.Source = p.File, p.Source
	return c.Start(ctx, req)
}

func describe(p *pipelines.Pipeline, from string) PipelineInfo {
	info := PipelineInfo{Name: p.Name, Description: p.Description, File: p.File, Spec: p.Hash, From: from,
		Inputs: []InputInfo{}, Environments: []string{}, Stages: []string{}}
	for _, in := range p.Inputs {
		info.Inputs = append(info.Inputs, InputInfo{Name: in.Name, Type: cmp.Or(in.Type, "string"), Description: in.Description,
			Default: in.Default, Required: in.Required, Enum: in.Allowed})
	}
	for _, s := range p.Stages {
		info.Stages = append(info.Stages, s.ID)
		if s.Environment != "" && !slices.Contains(info.Environments, s.Environment) {
			info.Environments = append(info.Environments, s.Environment)
		}
	}
	for _, e := range p.Environments {
		if !slices.Contains(info.Environments, e.Name) {
			info.Environments = append(info.Environments, e.Name)
		}
	}
	return info
}

// StartByName is the body of POST /api/v1/pipelines/{name}/runs.
type StartByName struct {
	Inputs map[string]any `json:"inputs"`
}

func (c *Controller) apiPipelines(w http.ResponseWriter, r *http.Request) {
	list, err := c.Catalog(r.Context())
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	u := UserFrom(r.Context()) // only the pipelines the caller may get (rbac.go)
	list = slices.DeleteFunc(list, func(p PipelineInfo) bool { return !c.CanPipeline(u, rbac.Pipelines, rbac.Get, p.Name, p.Environments) })
	writeJSON(w, http.StatusOK, list)
}

func (c *Controller) apiStartPipeline(w http.ResponseWriter, r *http.Request) {
	var body StartByName
	if err := decodeOptional(r, &body); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	name := r.PathValue("name")
	req := c.caller(r)
	req.Inputs = body.Inputs
	if req.Inputs == nil {
		req.Inputs = map[string]any{}
	}
	c.serveStart(w, r, req, byNameDigest(name, req.Inputs), func(ctx context.Context, req StartRequest) (*pipelines.Run, error) {
		return c.StartPipeline(ctx, name, req)
	})
}

// byNameDigest names a start by name for its idempotency key: the pipeline name and the
// inputs (the source a name resolves to may change between two sends; the first start's run
// is the answer).
func byNameDigest(name string, inputs map[string]any) string {
	return requestDigest(StartRequest{File: "name:" + name, Inputs: inputs})
}

// StartPipelineOnce is StartPipeline under an idempotency key (the UI's promote form).
func (c *Controller) StartPipelineOnce(ctx context.Context, key, name string, req StartRequest) (*pipelines.Run, bool, error) {
	return c.startOnce(ctx, key, req, byNameDigest(name, req.Inputs), func(ctx context.Context, req StartRequest) (*pipelines.Run, error) {
		return c.StartPipeline(ctx, name, req)
	})
}
