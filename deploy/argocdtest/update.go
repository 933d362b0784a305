package argocdtest

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

// ApplicationPatchRequest is the body of PATCH /api/v1/applications/{name}
// (applicationApplicationPatchRequest).
type ApplicationPatchRequest struct {
	Name         string `json:"name"`
	Patch        string `json:"patch"`
	PatchType    string `json:"patchType"`
	AppNamespace string `json:"appNamespace,omitempty"`
	Project      string `json:"project,omitempty"`
}

// handlePatchApp serves PATCH /api/v1/applications/{name} like Argo CD's
// Server.Patch: the patch ("json": RFC 6902, the default; "merge": RFC 7386)
// is applied to the app as the server has it (metadata.resourceVersion
// included, so a JSON patch can "test" it), the result is validated like a
// created app, and its spec, labels, annotations and finalizers replace the
// stored ones. As upstream, the write itself does not check the
// resourceVersion: a change landing while the patched app is validated is
// overwritten (only the JSON patch's own test guards against changes made
// before the server read the app). Errors keep upstream's wording and codes:
// a failed test is "error applying patch: testing value … failed: test
// failed" with gRPC code Unknown (HTTP 500).
func (s *Server) handlePatchApp(w http.ResponseWriter, r *http.Request, p []string) {
	var req ApplicationPatchRequest
	if e := decodeBody(r, &req); e != nil {
		writeAPIError(w, e)
		return
	}
	st := s.lockApp(w, p[0], req.AppNamespace, req.Project)
	if st == nil {
		return
	}
	cur := append([]byte(nil), st.data...)
	key := st.key
	s.mu.Unlock()

	var patched []byte
	switch req.PatchType {
	case "json", "":
		patch, err := jsonpatch.DecodePatch([]byte(req.Patch))
		if err != nil {
			writeAPIError(w, errf(codeUnknown, "error decoding json patch: %v", err))
			return
		}
		if patched, err = patch.Apply(cur); err != nil {
			writeAPIError(w, errf(codeUnknown, "error applying patch: %v", err))
			return
		}
	case "merge":
		var err error
		if patched, err = jsonpatch.MergePatch(cur, []byte(req.Patch)); err != nil {
			writeAPIError(w, errf(codeUnknown, "error calculating merge patch: %v", err))
			return
		}
	default:
		writeAPIError(w, errf(codeInvalidArgument, "Patch type '%s' is not supported", req.PatchType))
		return
	}
	var newApp Application
	if err := json.Unmarshal(patched, &newApp); err != nil {
		writeAPIError(w, errf(codeUnknown, "error unmarshaling patched app: %v", err))
		return
	}
	if e := s.validateApp(r.Context(), &newApp); e != nil {
		writeAPIError(w, wrapErr("error validating and normalizing app", e))
		return
	}

	s.mu.Lock()
	st = s.apps[key]
	if st == nil || st.gone {
		s.mu.Unlock()
		writeAPIError(w, errPermissionDenied)
		return
	}
	changed := !jsonEqual(st.app.Spec, newApp.Spec) || !reflect.DeepEqual(st.app.Metadata.Labels, newApp.Metadata.Labels) ||
		!reflect.DeepEqual(st.app.Metadata.Annotations, newApp.Metadata.Annotations) ||
		!reflect.DeepEqual(st.app.Metadata.Finalizers, newApp.Metadata.Finalizers)
	if changed {
		st.app.Spec = newApp.Spec
		st.app.Metadata.Labels, st.app.Metadata.Annotations, st.app.Metadata.Finalizers =
			newApp.Metadata.Labels, newApp.Metadata.Annotations, newApp.Metadata.Finalizers
		st.app.Metadata.Generation++
		s.commit(st, EventModified)
		// The application controller notices the new spec asynchronously.
		s.goBackground(func() {
			if s.sleep(s.step) {
				s.reconcileApp(s.ctx, key, nil)
			}
		})
	}
	data := st.data
	s.mu.Unlock()
	replyRaw(w, r, data)
}

// validateApp is Argo CD's validateAndNormalizeApp for an updated app: a known
// project, a name, a destination, a source whose manifests can be generated.
func (s *Server) validateApp(ctx context.Context, a *Application) *apiError {
	project := a.Spec.project()
	s.mu.Lock()
	known := s.projects[project]
	s.mu.Unlock()
	if !known {
		return errPermissionDenied
	}
	if a.Metadata.Name == "" {
		return errf(codeUnknown, "resource name may not be empty")
	}
	if a.Spec.Destination.Server == "" && a.Spec.Destination.Name == "" {
		return errf(codeInvalidArgument, "application destination spec for %s is invalid: Destination server missing from app spec", a.Metadata.Name)
	}
	src := a.Spec.primarySource()
	if src.RepoURL == "" {
		return errf(codeInvalidArgument,
			"application spec for %s is invalid: InvalidSpecError: spec.source.repoURL and either spec.source.path, spec.source.chart, or spec.source.ref are required", a.Metadata.Name)
	}
	var types []string
	for _, t := range []struct {
		name string
		raw  json.RawMessage
	}{{"Helm", src.Helm}, {"Kustomize", src.Kustomize}, {"Directory", src.Directory}, {"Plugin", src.Plugin}} {
		if len(t.raw) > 0 && string(t.raw) != "null" {
			types = append(types, t.name)
		}
	}
	if len(types) > 1 {
		return errf(codeInvalidArgument, "application spec for %s is invalid: InvalidSpecError: Unable to determine app source type: multiple application sources defined: %s",
			a.Metadata.Name, strings.Join(types, ","))
	}
	if tg := s.loadTarget(ctx, a.Spec, src.TargetRevision, nil); tg.err != nil {
		return errf(codeInvalidArgument,
			"application spec for %s is invalid: InvalidSpecError: Unable to generate manifests in %s: rpc error: code = Unknown desc = %v",
			a.Metadata.Name, firstNonEmpty(src.Path, "."), tg.err)
	}
	return nil
}
