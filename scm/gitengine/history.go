package gitengine

import (
	"container/heap"
	"errors"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/prflow/prflow/scm"
)

const (
	fromA uint8 = 1 << iota
	fromB
	stale
)

type commitQueue []*object.Commit

func (q commitQueue) Len() int { return len(q) }
func (q commitQueue) Less(i, j int) bool {
	return q[i].Committer.When.After(q[j].Committer.When)
}
func (q commitQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *commitQueue) Push(x any)   { *q = append(*q, x.(*object.Commit)) }
func (q *commitQueue) Pop() any {
	old := *q
	c := old[len(old)-1]
	*q = old[:len(old)-1]
	return c
}

// MergeBase returns the best common ancestor of commits a and b, walking newest-first like
// git's merge-base, so it only needs the history down to that ancestor: when the walk needs a
// parent that was not fetched it returns ErrShallow (fetch deeper, see FetchHistory). No common
// ancestor at all is an error matching scm.ErrNotFound. With several best ancestors (criss-cross
// merges) the newest is returned.
func (w *Workspace) MergeBase(a, b string) (string, error) {
	ca, err := w.Commit(a)
	if err != nil {
		return "", err
	}
	cb, err := w.Commit(b)
	if err != nil {
		return "", err
	}
	if ca.Hash == cb.Hash {
		return a, nil
	}
	flags := map[plumbing.Hash]uint8{ca.Hash: fromA, cb.Hash: fromB}
	q := &commitQueue{ca, cb}
	heap.Init(q)
	var results []*object.Commit
	interesting := func() bool {
		for _, c := range *q {
			if flags[c.Hash]&stale == 0 {
				return true
			}
		}
		return false
	}
	for q.Len() > 0 && interesting() {
		c := heap.Pop(q).(*object.Commit)
		f := flags[c.Hash] & (fromA | fromB | stale)
		if f&(fromA|fromB) == fromA|fromB && f&stale == 0 {
			results = append(results, c)
			f |= stale
			flags[c.Hash] |= stale
		}
		for _, ph := range c.ParentHashes {
			if flags[ph]&f == f {
				continue
			}
			p, err := w.repo.CommitObject(ph)
			if err != nil {
				if f&stale != 0 {
					continue // below a found ancestor: not needed
				}
				if errors.Is(err, plumbing.ErrObjectNotFound) {
					return "", fmt.Errorf("gitengine: merge base of %s and %s: %w", short(a), short(b), ErrShallow)
				}
				return "", err
			}
			flags[ph] |= f
			heap.Push(q, p)
		}
	}
	if len(results) == 0 {
		// Without a shallow boundary in the walk this means unrelated histories.
		if w.walkedShallow(flags) {
			return "", fmt.Errorf("gitengine: merge base of %s and %s: %w", short(a), short(b), ErrShallow)
		}
		return "", fmt.Errorf("gitengine: %s and %s have no common ancestor: %w", short(a), short(b), scm.ErrNotFound)
	}
	// Ancestors of a found base are usually marked stale before they are reached, but commits
	// with equal dates (made within one second) come off the queue in no set order, so the
	// walk can meet an ancestor of a base before the base itself. Keep only the bases no other
	// base contains (git's remove_redundant), then the newest.
	results = w.independent(results)
	best := results[0]
	for _, r := range results[1:] {
		if r.Committer.When.After(best.Committer.When) ||
			r.Committer.When.Equal(best.Committer.When) && r.Hash.String() < best.Hash.String() {
			best = r
		}
	}
	return best.Hash.String(), nil
}

// independent drops every commit of cs that another one of cs contains. It walks the fetched
// history only, and only when the merge-base walk found more than one base.
func (w *Workspace) independent(cs []*object.Commit) []*object.Commit {
	if len(cs) < 2 {
		return cs
	}
	redundant := map[plumbing.Hash]bool{}
	for _, from := range cs {
		if redundant[from.Hash] {
			continue
		}
		want := map[plumbing.Hash]bool{}
		for _, c := range cs {
			if c.Hash != from.Hash && !redundant[c.Hash] {
				want[c.Hash] = true
			}
		}
		seen := map[plumbing.Hash]bool{from.Hash: true}
		stack := append([]plumbing.Hash(nil), from.ParentHashes...)
		for len(stack) > 0 && len(want) > 0 {
			h := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[h] {
				continue
			}
			seen[h] = true
			if want[h] {
				redundant[h] = true
				delete(want, h)
			}
			c, err := w.repo.CommitObject(h)
			if err != nil {
				continue // past the fetched history
			}
			stack = append(stack, c.ParentHashes...)
		}
	}
	out := cs[:0:0]
	for _, c := range cs {
		if !redundant[c.Hash] {
			out = append(out, c)
		}
	}
	return out
}

// walkedShallow reports whether any walked commit is a shallow boundary of this repository.
func (w *Workspace) walkedShallow(flags map[plumbing.Hash]uint8) bool {
	sh, err := w.repo.Storer.Shallow()
	if err != nil {
		return true
	}
	for _, h := range sh {
		if _, ok := flags[h]; ok {
			return true
		}
	}
	return false
}

// FirstParentRange lists the commits from (exclusive) to to (inclusive) along first parents,
// oldest first; ErrShallow when history ends before reaching from.
func (w *Workspace) FirstParentRange(from, to string) ([]*object.Commit, error) {
	var out []*object.Commit
	cur := to
	for cur != from {
		c, err := w.Commit(cur)
		if err != nil {
			return nil, fmt.Errorf("gitengine: walk %s..%s: %w", short(from), short(to), ErrShallow)
		}
		out = append(out, c)
		if len(c.ParentHashes) == 0 {
			return nil, fmt.Errorf("gitengine: %s is not an ancestor of %s: %w", short(from), short(to), scm.ErrNotFound)
		}
		cur = c.ParentHashes[0].String()
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// MergeCommits three-way merges the trees of ours and theirs against base (commit SHAs; base ""
// = empty tree). It returns the merged tree, or the conflicting paths (sorted) and no tree.
func (w *Workspace) MergeCommits(base, ours, theirs string) (string, []string, error) {
	var bt plumbing.Hash
	if base != "" {
		c, err := w.Commit(base)
		if err != nil {
			return "", nil, err
		}
		bt = c.TreeHash
	}
	co, err := w.Commit(ours)
	if err != nil {
		return "", nil, err
	}
	ct, err := w.Commit(theirs)
	if err != nil {
		return "", nil, err
	}
	return w.MergeTrees(bt.String(), co.TreeHash.String(), ct.TreeHash.String())
}

// MergeTrees three-way merges tree SHAs (base may be the zero SHA or "" for an empty tree).
func (w *Workspace) MergeTrees(base, ours, theirs string) (string, []string, error) {
	h := func(s string) plumbing.Hash {
		if s == "" {
			return plumbing.ZeroHash
		}
		return plumbing.NewHash(s)
	}
	t, conflicts, err := mergeTrees(w.store, h(base), h(ours), h(theirs))
	if err != nil {
		return "", nil, fmt.Errorf("gitengine: merge trees: %w", err)
	}
	if len(conflicts) > 0 {
		return "", conflicts, nil
	}
	return t.String(), nil, nil
}
