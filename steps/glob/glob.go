// Package glob matches slash-separated paths against globs where a "**" segment matches any
// number of segments. Trigger filters (pipelines) and the TriggerPaths step (steps) share it.
//
// It imports nothing of prflow and sits under steps, the lower of its two users, because a
// layer may import only its own layer or lower ones (cmd → pipelines → steps → deploy/scm →
// queue).
package glob

import (
	"fmt"
	"path"
	"strings"
)

// MaxDoubleStars bounds the "**" segments of one glob (matching is backtracking).
const MaxDoubleStars = 4

// Match is path.Match where a "**" segment matches any number of segments.
func Match(glob, name string) (bool, error) {
	if !strings.Contains(glob, "**") {
		return path.Match(glob, name)
	}
	gs, ns := strings.Split(glob, "/"), strings.Split(name, "/")
	if strings.Count(glob, "**") > MaxDoubleStars {
		return false, fmt.Errorf("more than %d ** segments", MaxDoubleStars)
	}
	for _, g := range gs {
		if g != "**" {
			if _, err := path.Match(g, ""); err != nil {
				return false, err
			}
		}
	}
	return segMatch(gs, ns, 0), nil
}

// Any reports whether s matches one of globs (bad globs match nothing).
func Any(globs []string, s string) bool {
	for _, g := range globs {
		if ok, _ := Match(g, s); ok {
			return true
		}
	}
	return false
}

func segMatch(gs, ns []string, depth int) bool {
	if depth > 64 {
		return false
	}
	for len(gs) > 0 {
		if gs[0] == "**" {
			for len(gs) > 1 && gs[1] == "**" {
				gs = gs[1:]
			}
			if len(gs) == 1 {
				return true
			}
			for i := 0; i <= len(ns); i++ {
				if segMatch(gs[1:], ns[i:], depth+1) {
					return true
				}
			}
			return false
		}
		if len(ns) == 0 {
			return false
		}
		if ok, _ := path.Match(gs[0], ns[0]); !ok {
			return false
		}
		gs, ns = gs[1:], ns[1:]
	}
	return len(ns) == 0
}
