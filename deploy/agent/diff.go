package agent

import (
	"context"
	"encoding/json"
)

// DiffRequest asks an agent what a git revision would change in its apps (subject
// prflow.agent.<agent>.diff): the manifests each app would render at Revision, compared with
// what the app deploys now. The agent renders through its GitOps backend (Argo CD renders
// with its own repo-server, Helm, Kustomize and jsonnet; its normalisation applies), so the
// preview shows what a merge of Revision would deploy, not what the edited files say.
type DiffRequest struct {
	V int `json:"v"`
	// Apps are the apps to preview (names as in AppStatus.Ref()).
	Apps []string `json:"apps,omitempty"`
	// ApplicationSet, when set, also previews the apps this ApplicationSet would generate at
	// Revision (its git generators read at Revision): an app whose generated spec changes is
	// rendered with the new spec, a generated app that does not exist yet is reported as
	// Created, an existing app no longer generated as Deleted.
	ApplicationSet string `json:"applicationSet,omitempty"`
	// RepoURL is the release repo ("acme/release" or a URL), to match the apps' sources.
	RepoURL string `json:"repoURL,omitempty"`
	// Revision is the commit to render (the PR's head SHA).
	Revision string `json:"revision"`
	// MaxDiffBytes caps each app's unified diff (default 64 KiB); Truncated says when it hit.
	MaxDiffBytes int `json:"maxDiffBytes,omitempty"`
}

// Resource change types.
const (
	ChangeAdded   = "added"
	ChangeChanged = "changed"
	ChangeRemoved = "removed"
)

// ResourceDiff is one Kubernetes object a revision changes.
type ResourceDiff struct {
	Group     string `json:"group,omitempty"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Change    string `json:"change"` // added, changed, removed
	// Paths are the changed fields as dotted paths ("spec.replicas", "data.image"), sorted.
	Paths []string `json:"paths,omitempty"`
	// Values are the new values of Paths (nil for a path the revision removes), or of every
	// field of an added object, so policies can judge a change ("spec.replicas" → 0). Never
	// set for a masked (Secret) resource.
	Values map[string]any `json:"values,omitempty"`
	// Diff is the unified diff of the object's YAML (old → new). Secret data values never
	// leave the agent: a changed value shows as "(changed)" on both sides, and Masked is set.
	Diff   string `json:"diff,omitempty"`
	Masked bool   `json:"masked,omitempty"`
}

// AppDiff is what a revision changes in one app.
type AppDiff struct {
	App   string `json:"app"`
	Agent string `json:"agent,omitempty"`
	URL   string `json:"url,omitempty"`
	// Created: the app does not exist yet and would be generated at Revision (Resources are
	// all added); Deleted: it exists and would no longer be generated.
	Created bool `json:"created,omitempty"`
	Deleted bool `json:"deleted,omitempty"`
	// SpecChanges are changes of the app's own spec at Revision (Helm parameters, Kustomize
	// images, jsonnet arguments generated from the release repo), as "path: old → new".
	SpecChanges []string `json:"specChanges,omitempty"`
	// SpecNotRendered: the resources were rendered with the app's current spec, not the one
	// SpecChanges describe (Argo CD renders only stored specs; an agent with preview apps
	// renders the new spec), so an unchanged resource list does not mean the new spec renders
	// the same. For a Created app: its resources were not rendered at all.
	SpecNotRendered bool           `json:"specNotRendered,omitempty"`
	Resources       []ResourceDiff `json:"resources,omitempty"`
	// SecretsNotCompared are Secrets ("namespace/name: key, …") whose values the preview could
	// not compare: Argo CD masks the values it hands out, a rendering at a revision by itself,
	// so a change of a value alone is invisible before the merge (its keys are compared).
	SecretsNotCompared []string `json:"secretsNotCompared,omitempty"`
	// Unchanged counts the app's objects that render the same.
	Unchanged int  `json:"unchanged"`
	Truncated bool `json:"truncated,omitempty"`
	// Error is why this app could not be rendered (e.g. Argo CD's ComparisonError); the
	// other apps are still answered.
	Error string `json:"error,omitempty"`
}

// Changed reports whether the revision changes anything of the app.
func (d *AppDiff) Changed() bool {
	return d.Created || d.Deleted || len(d.SpecChanges) > 0 || len(d.Resources) > 0
}

// DiffReply answers a DiffRequest, one AppDiff per app in name order.
type DiffReply struct {
	V     int       `json:"v"`
	Apps  []AppDiff `json:"apps,omitempty"`
	Error *Error    `json:"error,omitempty"`
}

// Differ is implemented by handlers that can preview a revision (request kind "diff");
// others answer CodeUnsupported.
type Differ interface {
	Diff(ctx context.Context, req DiffRequest) ([]AppDiff, error)
}

// Diff asks agentID to preview req.Revision for req's apps.
func (c *Client) Diff(ctx context.Context, agentID string, req DiffRequest) ([]AppDiff, error) {
	req.V = Version
	var rep DiffReply
	if err := c.ask(ctx, agentID, "diff", req, &rep, 0, func() *Error { return rep.Error }); err != nil {
		return nil, err
	}
	return rep.Apps, nil
}

func dispatchDiff(ctx context.Context, h Handler, data []byte, fail func(error) *Error) DiffReply {
	var req DiffRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return DiffReply{V: Version, Error: fail(Errorf(CodeInvalid, "diff: %v", err))}
	}
	if req.Revision == "" {
		return DiffReply{V: Version, Error: fail(Errorf(CodeInvalid, "diff: no revision given"))}
	}
	if len(req.Apps) == 0 && req.ApplicationSet == "" {
		return DiffReply{V: Version, Error: fail(Errorf(CodeInvalid, "diff: no apps or applicationSet given"))}
	}
	d, ok := h.(Differ)
	if !ok {
		return DiffReply{V: Version, Error: fail(Errorf(CodeUnsupported, "diff: this agent cannot preview revisions"))}
	}
	apps, err := d.Diff(ctx, req)
	if err != nil {
		return DiffReply{V: Version, Error: fail(err)}
	}
	return DiffReply{V: Version, Apps: apps}
}
