package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/gitengine"
)

// Ref namespaces in the remote.
const (
	pullsPrefix  = "refs/prflow/pulls/"
	openPrefix   = "refs/prflow/open/"
	statusPrefix = "refs/prflow/statuses/"
	recordFile   = "pr.json"
	statusFile   = "statuses.json"
)

// record is a PR as stored in pr.json.
type record struct {
	Number      int             `json:"number"`
	Title       string          `json:"title"`
	Body        string          `json:"body,omitempty"`
	State       scm.PRState     `json:"state"`
	Draft       bool            `json:"draft,omitempty"`
	Head        string          `json:"head"`
	Base        string          `json:"base"`
	HeadSHA     string          `json:"headSha"` // at open, then frozen at merge or close
	MergeSHA    string          `json:"mergeSha,omitempty"`
	MergeMethod scm.MergeMethod `json:"mergeMethod,omitempty"`
	Labels      []string        `json:"labels,omitempty"`
	Reviewers   []string        `json:"reviewers,omitempty"`
	// ChangedFiles is frozen when the PR is merged or closed (the head may be deleted later).
	ChangedFiles []string  `json:"changedFiles,omitempty"`
	Comments     []Comment `json:"comments,omitempty"`
	Author       string    `json:"author"`
	CreatedAt    time.Time `json:"createdAt"`
	UpdatedAt    time.Time `json:"updatedAt"`
	ClosedAt     time.Time `json:"closedAt,omitzero"`
}

// Comment is a PR comment as the local driver stores it.
type Comment struct {
	Author string    `json:"author"`
	Body   string    `json:"body"`
	At     time.Time `json:"at"`
	Edited time.Time `json:"edited,omitzero"` // last EditComment
}

// stored is a record and the commit holding it (the value its ref must have to update it).
type stored struct {
	rec record
	tip string
}

func pullRef(n int) string { return pullsPrefix + strconv.Itoa(n) }

// openRef exists while a PR from head into base is open; its name hashes both so that any
// branch names fit in a ref.
func openRef(base, head string) string {
	h := sha256.Sum256([]byte(base + "\x00" + head))
	return openPrefix + hex.EncodeToString(h[:16])
}

// maxNumber is the highest PR number among the remote's refs.
func maxNumber(refs map[string]string) int {
	n := 0
	for name := range refs {
		if v, ok := strings.CutPrefix(name, pullsPrefix); ok {
			if i, err := strconv.Atoi(v); err == nil && i > n {
				n = i
			}
		}
	}
	return n
}

func (p *Provider) loadRecord(ctx context.Context, w *gitengine.Workspace, refs map[string]string, n int) (stored, error) {
	ref := pullRef(n)
	if _, ok := refs[ref]; !ok {
		return stored{}, fmt.Errorf("PR #%d: %w", n, scm.ErrNotFound)
	}
	if err := w.Fetch(ctx, 1, ref); err != nil {
		return stored{}, err
	}
	return readRecord(w, ref)
}

func readRecord(w *gitengine.Workspace, ref string) (stored, error) {
	tip, err := w.Ref(ref)
	if err != nil {
		return stored{}, err
	}
	data, err := w.ReadFile(tip, recordFile)
	if err != nil {
		return stored{}, fmt.Errorf("PR record %s: %w", ref, err)
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return stored{}, fmt.Errorf("PR record %s is corrupt: %w", ref, err)
	}
	return stored{rec: rec, tip: tip}, nil
}

// loadAll reads every PR record, newest number first.
func (p *Provider) loadAll(ctx context.Context, w *gitengine.Workspace) ([]stored, error) {
	if err := w.Fetch(ctx, 1, pullsPrefix+"*"); err != nil {
		return nil, err
	}
	refs, err := w.Refs(pullsPrefix)
	if err != nil {
		return nil, err
	}
	out := make([]stored, 0, len(refs))
	for name := range refs {
		st, err := readRecord(w, name)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rec.Number > out[j].rec.Number })
	return out, nil
}

// writeJSON stores one JSON file as a commit on top of parent ("" = first version).
func (p *Provider) writeJSON(w *gitengine.Workspace, parent, file string, v any, msg string) (string, error) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", err
	}
	tree, _, err := w.ApplyChanges("", []scm.FileChange{{Path: file, Content: append(data, '\n')}})
	if err != nil {
		return "", err
	}
	var parents []string
	if parent != "" {
		parents = []string{parent}
	}
	return w.WriteCommit(gitengine.CommitSpec{Tree: tree, Parents: parents, Message: msg, Author: p.identity, When: p.now()})
}

// updateRecord applies fn to PR n and pushes the new record together with the ref updates fn
// asks for, retrying when another worker changed the PR first.
func (p *Provider) updateRecord(ctx context.Context, repo scm.Repo, n int, msg string,
	fn func(w *gitengine.Workspace, refs map[string]string, rec *record) ([]gitengine.RefUpdate, error)) (record, error) {
	var out record
	err := p.retry(ctx, func() error {
		w, refs, st, err := p.openRecord(ctx, repo, n)
		if err != nil {
			return err
		}
		defer w.Close()
		rec := st.rec
		extra, err := fn(w, refs, &rec)
		if errors.Is(err, errUnchanged) {
			out = st.rec
			return nil
		}
		if err != nil {
			return err
		}
		rec.UpdatedAt = p.now().UTC()
		c, err := p.writeJSON(w, st.tip, recordFile, rec, msg)
		if err != nil {
			return err
		}
		updates := append([]gitengine.RefUpdate{{Name: pullRef(n), Old: st.tip, New: c}}, extra...)
		if err := w.Push(ctx, updates...); err != nil {
			return err
		}
		out = rec
		return nil
	})
	return out, err
}

// errUnchanged tells updateRecord that nothing needs writing.
var errUnchanged = errors.New("unchanged")
