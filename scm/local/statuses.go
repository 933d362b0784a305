package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/gitengine"
)

// statusEntry is a commit status as stored in statuses.json.
type statusEntry struct {
	scm.Status
	UpdatedAt time.Time `json:"updatedAt"`
}

// SetStatus records a commit status (one per context, the latest wins) in
// refs/prflow/statuses/<sha>. The commit must exist in the repository.
func (p *Provider) SetStatus(ctx context.Context, repo scm.Repo, sha string, st scm.Status) error {
	op := fmt.Sprintf("set status %s on %s", st.Context, sha)
	switch st.State {
	case scm.StatusPending, scm.StatusSuccess, scm.StatusFailure, scm.StatusError:
	default:
		return p.fail(repo, op, fmt.Errorf("unknown status state %q (want pending, success, failure or error)", st.State))
	}
	if strings.TrimSpace(st.Context) == "" {
		return p.fail(repo, op, errors.New("status context is required"))
	}
	if !shaRe.MatchString(sha) {
		return p.fail(repo, op, fmt.Errorf("%q is not a full commit SHA", sha))
	}
	err := p.retry(ctx, func() error {
		w, refs, err := p.openRemote(ctx, repo)
		if err != nil {
			return err
		}
		defer w.Close()
		if err := w.FetchCommit(ctx, refs, sha); err != nil {
			return err
		}
		entries, tip, err := p.loadStatuses(ctx, w, refs, sha)
		if err != nil {
			return err
		}
		entries[st.Context] = statusEntry{Status: st, UpdatedAt: p.now().UTC()}
		c, err := p.writeJSON(w, tip, statusFile, entries, fmt.Sprintf("status %s: %s", st.Context, st.State))
		if err != nil {
			return err
		}
		return w.Push(ctx, gitengine.RefUpdate{Name: statusPrefix + sha, Old: tip, New: c})
	})
	return p.fail(repo, op, err)
}

func (p *Provider) loadStatuses(ctx context.Context, w *gitengine.Workspace, refs map[string]string, sha string) (map[string]statusEntry, string, error) {
	entries := map[string]statusEntry{}
	ref := statusPrefix + sha
	if _, ok := refs[ref]; !ok {
		return entries, "", nil
	}
	if err := w.Fetch(ctx, 1, ref); err != nil {
		return nil, "", err
	}
	tip, err := w.Ref(ref)
	if err != nil {
		return nil, "", err
	}
	data, err := w.ReadFile(tip, statusFile)
	if err != nil {
		return nil, "", err
	}
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, "", fmt.Errorf("status record %s is corrupt: %w", ref, err)
	}
	return entries, tip, nil
}

// Statuses returns the latest status per context for a commit, sorted by context (the local
// driver's own read API).
func (p *Provider) Statuses(ctx context.Context, repo scm.Repo, sha string) ([]scm.Status, error) {
	op := "list statuses of " + sha
	w, refs, err := p.openRemote(ctx, repo)
	if err != nil {
		return nil, p.fail(repo, op, err)
	}
	defer w.Close()
	entries, _, err := p.loadStatuses(ctx, w, refs, sha)
	if err != nil {
		return nil, p.fail(repo, op, err)
	}
	out := make([]scm.Status, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Status)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Context < out[j].Context })
	return out, nil
}
