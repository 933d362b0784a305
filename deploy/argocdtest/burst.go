package argocdtest

import (
	"errors"
	"fmt"
)

// AddApps creates many apps in one burst, as when an ApplicationSet generates
// them or a big manifest is applied: every ADDED is published at once, under
// one lock, before the controller reconciles any of them (one MODIFIED each
// after that). A burst larger than a watch stream's free buffer loses events
// on that stream, as on Argo CD. AddApps returns once all are reconciled. The
// apps are checked first; none is created when one is invalid.
func (s *Server) AddApps(apps []Application) error {
	keys := make([]string, 0, len(apps))
	seen := map[string]bool{}
	for i := range apps {
		a := &apps[i]
		if a.Metadata.Name == "" {
			return fmt.Errorf("argocdtest: AddApps: app #%d: metadata.name is empty", i+1)
		}
		a.Metadata.Namespace = firstNonEmpty(a.Metadata.Namespace, defaultNamespace)
		key := a.Metadata.Namespace + "/" + a.Metadata.Name
		if seen[key] {
			return fmt.Errorf("argocdtest: AddApps: app #%d: %s is listed twice", i+1, key)
		}
		seen[key] = true
		keys = append(keys, key)
	}
	s.mu.Lock()
	for i, key := range keys {
		if !s.namespaces[apps[i].Metadata.Namespace] {
			s.mu.Unlock()
			return fmt.Errorf("argocdtest: AddApps %s: namespace %q is not enabled (see WithAppNamespaces)", key, apps[i].Metadata.Namespace)
		}
		if st := s.apps[key]; st != nil && !st.gone {
			s.mu.Unlock()
			return fmt.Errorf("argocdtest: AddApps %s: %w", key, ErrAppExists)
		}
	}
	for i := range apps {
		s.projects[apps[i].Spec.project()] = true
		s.insertApp(apps[i])
	}
	s.mu.Unlock()
	rc := newRevCache()
	for _, key := range keys {
		if s.ctx.Err() != nil {
			return errors.New("argocdtest: AddApps: the server was closed")
		}
		s.reconcileApp(s.ctx, key, rc)
	}
	return nil
}
