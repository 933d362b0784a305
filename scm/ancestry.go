package scm

import (
	"container/list"
	"context"
	"fmt"
	"strings"
	"sync"
)

// DefaultAncestryCacheSize bounds an AncestryCache whose Max is 0.
const DefaultAncestryCacheSize = 4096

// IsFullSHA reports whether s is a full commit SHA (40 hex digits for SHA-1, 64 for SHA-256).
func IsFullSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// CheckAncestryArgs validates the commits of an IsAncestor call and returns them in lower case.
// Only full SHAs are accepted: a branch name would give an answer that changes over time,
// which neither the cache nor a revision gate can use.
func CheckAncestryArgs(ancestor, descendant string) (string, string, error) {
	for _, c := range []struct{ field, sha string }{{"ancestor", ancestor}, {"descendant", descendant}} {
		if !IsFullSHA(c.sha) {
			return "", "", fmt.Errorf("%s %q is not a full commit SHA", c.field, c.sha)
		}
	}
	return strings.ToLower(ancestor), strings.ToLower(descendant), nil
}

// AncestryCache remembers IsAncestor answers, least recently used out first. Both answers are
// safe to keep: commits are immutable, so whether one SHA contains another never changes.
// Errors are never cached. The zero value is ready to use; it is safe for concurrent use.
type AncestryCache struct {
	// Max bounds the number of answers kept (0 means DefaultAncestryCacheSize).
	Max int

	mu sync.Mutex
	m  map[ancestryKey]*list.Element
	l  list.List // of *ancestryEntry, most recently used first
}

type ancestryKey struct {
	repo                 Repo
	ancestor, descendant string
}

type ancestryEntry struct {
	key ancestryKey
	yes bool
}

// Lookup answers from the cache, or calls ask and keeps its answer. ancestor and descendant
// must already be checked with CheckAncestryArgs. Equal commits are an ancestor of each other
// without asking.
func (c *AncestryCache) Lookup(ctx context.Context, repo Repo, ancestor, descendant string,
	ask func(ctx context.Context) (bool, error)) (bool, error) {
	if ancestor == descendant {
		return true, nil
	}
	k := ancestryKey{repo, ancestor, descendant}
	if yes, ok := c.get(k); ok {
		return yes, nil
	}
	yes, err := ask(ctx)
	if err != nil {
		return false, err
	}
	c.put(k, yes)
	return yes, nil
}

// Len is the number of answers kept.
func (c *AncestryCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.l.Len()
}

func (c *AncestryCache) get(k ancestryKey) (bool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return false, false
	}
	c.l.MoveToFront(e)
	return e.Value.(*ancestryEntry).yes, true
}

func (c *AncestryCache) put(k ancestryKey, yes bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[ancestryKey]*list.Element{}
	}
	if e, ok := c.m[k]; ok {
		e.Value.(*ancestryEntry).yes = yes
		c.l.MoveToFront(e)
		return
	}
	c.m[k] = c.l.PushFront(&ancestryEntry{key: k, yes: yes})
	max := c.Max
	if max <= 0 {
		max = DefaultAncestryCacheSize
	}
	for c.l.Len() > max {
		last := c.l.Back()
		c.l.Remove(last)
		delete(c.m, last.Value.(*ancestryEntry).key)
	}
}
