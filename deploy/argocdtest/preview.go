package argocdtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// What a diff preview's temporary apps need, as Argo CD v3.2.11 does it (checked on realenv):
//
//   - an AppProject's resource rules: a namespaced kind is permitted when the whitelist is
//     empty or lists it and the blacklist does not; a cluster-scoped kind only when the
//     cluster whitelist lists it. A sync of an app with a kind its project does not permit
//     fails before applying anything: phase Failed, "one or more synchronization tasks are not
//     valid", the resource SyncFailed with "resource :ConfigMap is not permitted in project p";
//   - GET …/manifests?sourcePositions=1&revisions=x renders a multi-source app with the source
//     at that (1-based) position at x, the other sources at their targetRevision, all sources'
//     manifests in one list; a position out of range is HTTP 500, code 2, "source position is
//     out of range".

// GroupKind is v1alpha1 metav1.GroupKind of project resource rules ("*" matches any).
type GroupKind struct {
	Group string `json:"group"`
	Kind  string `json:"kind"`
}

// ProjectResources are an AppProject's resource rules.
type ProjectResources struct {
	ClusterWhitelist   []GroupKind
	NamespaceWhitelist []GroupKind
	NamespaceBlacklist []GroupKind
}

// SetProjectResources sets an AppProject's resource rules (creating the project when needed);
// projects without them permit every kind.
func (s *Server) SetProjectResources(project string, r ProjectResources) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.touchProjectLocked(project)
	ps := s.projectSpecs[project]
	if ps == nil {
		ps = &projectState{}
		s.projectSpecs[project] = ps
	}
	ps.rv = s.rv
	ps.resources = &ProjectResources{ClusterWhitelist: clone(r.ClusterWhitelist),
		NamespaceWhitelist: clone(r.NamespaceWhitelist), NamespaceBlacklist: clone(r.NamespaceBlacklist)}
}

func matchGK(l []GroupKind, group, kind string) bool {
	for _, gk := range l {
		if (gk.Group == "*" || gk.Group == group) && (gk.Kind == "*" || gk.Kind == kind) {
			return true
		}
	}
	return false
}

// deniedLocked are the sync results of objs whose kind project does not permit (nil when all
// are). Callers hold s.mu.
func (s *Server) deniedLocked(project string, objs []object) []ResourceResult {
	ps := s.projectSpecs[firstNonEmpty(project, "default")]
	if ps == nil || ps.resources == nil {
		return nil
	}
	r := ps.resources
	var out []ResourceResult
	for _, o := range objs {
		ok := false
		if clusterScoped[o.Kind] {
			ok = matchGK(r.ClusterWhitelist, o.Group, o.Kind)
		} else {
			ok = (len(r.NamespaceWhitelist) == 0 || matchGK(r.NamespaceWhitelist, o.Group, o.Kind)) && !matchGK(r.NamespaceBlacklist, o.Group, o.Kind)
		}
		if !ok {
			out = append(out, ResourceResult{Group: o.Group, Version: o.Version, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name,
				Status: "SyncFailed", SyncPhase: "Sync", Message: fmt.Sprintf("resource %s:%s is not permitted in project %s", o.Group, o.Kind, project)})
		}
	}
	return out
}

// multiSourceTarget renders a multi-source spec for GET …/manifests: each source at its
// targetRevision unless positions pin it to revisions.
func (s *Server) multiSourceTarget(r *http.Request, spec ApplicationSpec, positions, revisions []string) ([]object, *apiError) {
	srcs := clone(spec.Sources)
	if len(positions) != len(revisions) {
		return nil, errf(codeUnknown, "number of source positions (%d) and revisions (%d) differ", len(positions), len(revisions))
	}
	for i, p := range positions {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > len(srcs) {
			return nil, errf(codeUnknown, "source position is out of range")
		}
		srcs[n-1].TargetRevision = revisions[i]
	}
	var out []object
	for _, src := range srcs {
		if src.Path == "" {
			continue // a ref-only source (values for another) renders nothing itself
		}
		one := spec
		one.Source, one.Sources = nil, []ApplicationSource{src}
		tg := s.loadTarget(r.Context(), one, src.TargetRevision, nil)
		if tg.err != nil {
			if isRepoServerDown(tg.err) {
				return nil, errf(codeUnknown, "error generating manifests: %v", tg.err)
			}
			if tg.revision == "" {
				return nil, errf(codeUnknown, "unable to resolve '%s' to a commit SHA", src.TargetRevision)
			}
			return nil, errf(codeFailedPrecondition, "%v", tg.err)
		}
		out = append(out, tg.objects...)
	}
	return out, nil
}

// loadSources is loadTarget of a multi-source app: the first source at revision, the others at
// their targetRevision, the objects of all (ref-only sources render nothing).
func (s *Server) loadSources(ctx context.Context, spec ApplicationSpec, revision string, rc *revCache) target {
	var out target
	first := true
	for i, src := range spec.Sources {
		if src.Path == "" {
			continue
		}
		one := spec
		one.Source, one.Sources = nil, []ApplicationSource{src}
		rev := src.TargetRevision
		if i == 0 {
			rev = revision
		}
		tg := s.loadTarget(ctx, one, rev, rc)
		if tg.err != nil {
			return tg
		}
		if first {
			out, first = tg, false
			continue
		}
		out.objects = append(out.objects, tg.objects...)
	}
	if first {
		return target{err: errors.New("spec.sources: no source with a path")}
	}
	return out
}
