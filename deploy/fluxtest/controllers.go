package fluxtest

import (
	"strings"
	"time"
)

// The annotation Flux's CLI and prflow set to ask for a reconcile now (Flux's meta package
// calls it ReconcileRequestAnnotation); the controllers copy its value to
// status.lastHandledReconcileAt once they acted on it.
const requestedAt = "reconcile.fluxcd.io/requestedAt"

// controllers runs the fake source-controller and kustomize-controller: each pass makes at
// most one transition per object, and passes repeat every step while there is work.
func (s *Server) controllers() {
	defer s.wg.Done()
	t := time.NewTimer(s.step)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-s.changed:
		case <-t.C:
		}
		select {
		case <-s.closed:
			return
		case <-time.After(s.step):
		}
		s.mu.Lock()
		more := s.reconcileSources()
		more = s.reconcileKustomizations() || more
		s.mu.Unlock()
		if more {
			t.Reset(s.step)
		} else {
			t.Reset(time.Second)
		}
	}
}

func suspended(o map[string]any) bool {
	v, _ := getPath(o, "spec", "suspend").(bool)
	return v
}

func generation(o map[string]any) int64 {
	g, _ := getPath(o, "metadata", "generation").(int64)
	return g
}

// setCondition sets (or replaces) one condition in status.conditions.
func setCondition(o map[string]any, typ, status, reason, msg string, now time.Time) {
	conds, _ := getPath(o, "status", "conditions").([]any)
	c := map[string]any{"type": typ, "status": status, "reason": reason, "message": msg,
		"lastTransitionTime": now.UTC().Format(time.RFC3339), "observedGeneration": generation(o)}
	for i, e := range conds {
		if m, ok := e.(map[string]any); ok && m["type"] == typ {
			if m["status"] == status {
				c["lastTransitionTime"] = m["lastTransitionTime"]
			}
			conds[i] = c
			setPath(o, conds, "status", "conditions")
			return
		}
	}
	setPath(o, append(conds, c), "status", "conditions")
}

func removeCondition(o map[string]any, typ string) {
	conds, _ := getPath(o, "status", "conditions").([]any)
	out := conds[:0]
	for _, e := range conds {
		if m, ok := e.(map[string]any); ok && m["type"] == typ {
			continue
		}
		out = append(out, e)
	}
	setPath(o, out, "status", "conditions")
}

// reconcileSources fetches the branch head of every GitRepository asked to (s.mu held).
func (s *Server) reconcileSources() bool {
	if s.srcDown {
		return false
	}
	more := false
	for _, key := range sortedKeys(s.objs["gitrepositories"]) {
		o := s.objs["gitrepositories"][key]
		req := str(o, "metadata", "annotations", requestedAt)
		poll, _ := getPath(o, "status", "_poll").(bool)
		due := getPath(o, "status", "artifact") == nil || poll || req != str(o, "status", "lastHandledReconcileAt") ||
			getPath(o, "status", "observedGeneration") != generation(o)
		if !due || suspended(o) {
			continue
		}
		next := clone(o)
		setPath(next, nil, "status", "_poll")
		branch := str(o, "spec", "ref", "branch")
		if branch == "" {
			branch = "master" // Flux's default
		}
		now := s.now()
		sha, err := s.resolve(str(o, "spec", "url"), branch)
		if err != nil {
			setCondition(next, "Ready", "False", "GitOperationFailed", "failed to checkout and determine revision: "+err.Error(), now)
		} else {
			rev := branch + "@sha1:" + sha
			setPath(next, map[string]any{"revision": rev, "path": "gitrepository/" + key + "/" + sha + ".tar.gz",
				"url":            "http://source-controller.flux-system.svc/gitrepository/" + key + "/" + sha + ".tar.gz",
				"lastUpdateTime": now.UTC().Format(time.RFC3339)}, "status", "artifact")
			setCondition(next, "Ready", "True", "Succeeded", "stored artifact for revision '"+rev+"'", now)
			setCondition(next, "ArtifactInStorage", "True", "Succeeded", "stored artifact for revision '"+rev+"'", now)
		}
		if req != "" {
			setPath(next, req, "status", "lastHandledReconcileAt")
		}
		setPath(next, generation(o), "status", "observedGeneration")
		if jsonEqual(next, o) {
			continue
		}
		s.replaceStatus("gitrepositories", o, next)
		more = true
	}
	return more
}

// replaceStatus stores next (which differs from cur only in status) without a generation
// bump (s.mu held).
func (s *Server) replaceStatus(resource string, cur, next map[string]any) {
	s.objs[resource][str(cur, "metadata", "namespace")+"/"+str(cur, "metadata", "name")] = next
	s.record(resource, "MODIFIED", next)
}

// sourceOf finds the source object a Kustomization refers to (s.mu held).
func (s *Server) sourceOf(o map[string]any) map[string]any {
	kind := str(o, "spec", "sourceRef", "kind")
	ns := str(o, "spec", "sourceRef", "namespace")
	if ns == "" {
		ns = str(o, "metadata", "namespace")
	}
	res := map[string]string{"GitRepository": "gitrepositories", "OCIRepository": "ocirepositories"}[kind]
	if res == "" {
		return nil
	}
	return s.objs[res][ns+"/"+str(o, "spec", "sourceRef", "name")]
}

// reconcileKustomizations moves each Kustomization one step: Reconciling first, then applied
// or failed (s.mu held).
func (s *Server) reconcileKustomizations() bool {
	if s.ksDown {
		return false
	}
	more := false
	for _, key := range sortedKeys(s.objs["kustomizations"]) {
		o := s.objs["kustomizations"][key]
		if suspended(o) {
			continue
		}
		req := str(o, "metadata", "annotations", requestedAt)
		src := s.sourceOf(o)
		rev := ""
		if src != nil {
			rev = str(src, "status", "artifact", "revision")
		}
		due := req != str(o, "status", "lastHandledReconcileAt") || getPath(o, "status", "observedGeneration") != generation(o) ||
			(rev != "" && rev != str(o, "status", "lastAttemptedRevision"))
		if !due {
			continue
		}
		now := s.now()
		next := clone(o)
		reconciling := false
		for _, c := range asList(getPath(o, "status", "conditions")) {
			// A failed attempt leaves Reconciling=True "ProgressingWithRetry" (as the real
			// kustomize-controller does): that is not a reconcile under way.
			if c["type"] == "Reconciling" && c["status"] == "True" && c["reason"] != "ProgressingWithRetry" {
				reconciling = true
			}
		}
		switch {
		case !reconciling:
			setCondition(next, "Reconciling", "True", "Progressing", "Reconciliation in progress", now)
			setCondition(next, "Ready", "Unknown", "Progressing", "Reconciliation in progress", now)
		case rev == "":
			removeCondition(next, "Reconciling")
			setCondition(next, "Ready", "False", "ArtifactFailed", "Source artifact not found, retrying in 30s", now)
			s.handled(next, req)
		default:
			removeCondition(next, "Reconciling")
			setPath(next, rev, "status", "lastAttemptedRevision")
			sha := rev[strings.LastIndex(rev, ":")+1:]
			if msg, bad := s.bad[sha]; bad {
				setCondition(next, "Reconciling", "True", "ProgressingWithRetry", "Detecting drift for revision "+rev, now)
				setCondition(next, "Ready", "False", "HealthCheckFailed", msg, now)
			} else {
				setPath(next, rev, "status", "lastAppliedRevision")
				setCondition(next, "Ready", "True", "ReconciliationSucceeded", "Applied revision: "+rev, now)
			}
			s.handled(next, req)
		}
		s.replaceStatus("kustomizations", o, next)
		more = true
	}
	return more
}

func (s *Server) handled(o map[string]any, req string) {
	if req != "" {
		setPath(o, req, "status", "lastHandledReconcileAt")
	}
	setPath(o, generation(o), "status", "observedGeneration")
}

func asList(v any) []map[string]any {
	l, _ := v.([]any)
	out := make([]map[string]any, 0, len(l))
	for _, e := range l {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
