package gitengine

import (
	"sort"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// mergeTrees three-way merges the trees ours and theirs against base (zero hash = empty tree),
// like git's default strategy without rename detection: a path changed on one side only takes
// that side; a file changed on both sides is merged line by line; modify/delete, add/add with
// different content, file/directory clashes and submodule changes on both sides are conflicts.
// Conflicting paths are returned sorted; the tree is only valid when there are none.
func mergeTrees(s storer.EncodedObjectStorer, base, ours, theirs plumbing.Hash) (plumbing.Hash, []string, error) {
	var conflicts []string
	h, _, err := mergeDir(s, base, ours, theirs, "", &conflicts)
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	sort.Strings(conflicts)
	return h, conflicts, nil
}

func mergeDir(s storer.EncodedObjectStorer, base, ours, theirs plumbing.Hash, prefix string, conflicts *[]string) (plumbing.Hash, bool, error) {
	switch {
	case ours == theirs:
		return ours, ours.IsZero(), nil
	case base == ours:
		return theirs, theirs.IsZero(), nil
	case base == theirs:
		return ours, ours.IsZero(), nil
	}
	eb, err := treeEntries(s, base)
	if err != nil {
		return plumbing.ZeroHash, false, err
	}
	eo, err := treeEntries(s, ours)
	if err != nil {
		return plumbing.ZeroHash, false, err
	}
	et, err := treeEntries(s, theirs)
	if err != nil {
		return plumbing.ZeroHash, false, err
	}
	names := map[string]bool{}
	for _, m := range []map[string]object.TreeEntry{eb, eo, et} {
		for n := range m {
			names[n] = true
		}
	}
	var out []object.TreeEntry
	for n := range names {
		b, bok := eb[n]
		o, ook := eo[n]
		t, tok := et[n]
		full := prefix + n
		same := func(x object.TreeEntry, xok bool, y object.TreeEntry, yok bool) bool {
			return xok == yok && (!xok || (x.Hash == y.Hash && x.Mode == y.Mode))
		}
		switch {
		case same(o, ook, t, tok):
			if ook {
				out = append(out, o)
			}
			continue
		case same(b, bok, o, ook):
			if tok {
				out = append(out, t)
			}
			continue
		case same(b, bok, t, tok):
			if ook {
				out = append(out, o)
			}
			continue
		}
		isDir := func(e object.TreeEntry, ok bool) bool { return ok && e.Mode == filemode.Dir }
		isFile := func(e object.TreeEntry, ok bool) bool {
			return ok && (e.Mode == filemode.Regular || e.Mode == filemode.Executable || e.Mode == filemode.Deprecated)
		}
		// Both sides changed this name differently.
		if (isDir(o, ook) || !ook) && (isDir(t, tok) || !tok) && (isDir(b, bok) || !bok) {
			var bh, oh, th plumbing.Hash
			if bok {
				bh = b.Hash
			}
			if ook {
				oh = o.Hash
			}
			if tok {
				th = t.Hash
			}
			if !ook || !tok {
				// One side deleted a directory the other changed: every file changed on the
				// surviving side is a modify/delete conflict.
				surviving := oh
				if !ook {
					surviving = th
				}
				var files []string
				if err := diffTrees(s, bh, surviving, full+"/", &files); err != nil {
					return plumbing.ZeroHash, false, err
				}
				*conflicts = append(*conflicts, files...)
				continue
			}
			h, empty, err := mergeDir(s, bh, oh, th, full+"/", conflicts)
			if err != nil {
				return plumbing.ZeroHash, false, err
			}
			if !empty {
				out = append(out, object.TreeEntry{Name: n, Mode: filemode.Dir, Hash: h})
			}
			continue
		}
		if isFile(o, ook) && isFile(t, tok) && (isFile(b, bok) || !bok) {
			if !bok {
				*conflicts = append(*conflicts, full) // add/add with different content
				continue
			}
			bd, err := readBlob(s, b.Hash)
			if err != nil {
				return plumbing.ZeroHash, false, err
			}
			od, err := readBlob(s, o.Hash)
			if err != nil {
				return plumbing.ZeroHash, false, err
			}
			td, err := readBlob(s, t.Hash)
			if err != nil {
				return plumbing.ZeroHash, false, err
			}
			merged, ok := mergeLines(bd, od, td)
			if !ok {
				*conflicts = append(*conflicts, full)
				continue
			}
			mode := o.Mode
			if o.Mode == b.Mode {
				mode = t.Mode
			} else if t.Mode != b.Mode && t.Mode != o.Mode {
				*conflicts = append(*conflicts, full) // both changed the mode differently
				continue
			}
			h, err := writeBlob(s, merged)
			if err != nil {
				return plumbing.ZeroHash, false, err
			}
			out = append(out, object.TreeEntry{Name: n, Mode: mode, Hash: h})
			continue
		}
		// modify/delete, file/directory, symlink or submodule changed on both sides.
		*conflicts = append(*conflicts, full)
	}
	if len(out) == 0 {
		if prefix == "" {
			h, err := writeTree(s, nil)
			return h, true, err
		}
		return plumbing.ZeroHash, true, nil
	}
	h, err := writeTree(s, out)
	return h, false, err
}
