package github

import "sync"

// treeCache remembers the tree of commits the driver has seen (a commit's tree never changes),
// so that Commit on a parent that Branch just read needs no GET /git/commits call. It is
// bounded: when full it starts over, which only costs a lookup.
type treeCache struct {
	mu sync.Mutex
	m  map[string]string
}

const treeCacheSize = 4096

func (c *treeCache) put(commit, tree string) {
	if commit == "" || tree == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= treeCacheSize {
		c.m = make(map[string]string)
	}
	c.m[commit] = tree
}

func (c *treeCache) get(commit string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.m[commit]
	return t, ok
}
