package gitengine

import (
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/prflow/prflow/scm"
)

// ErrBadPath is returned for a file path that is empty, absolute, not clean, or that names a
// ".git" component; such paths could escape the repository or corrupt it.
var ErrBadPath = errors.New("invalid file path")

// ValidatePath checks a repository-relative, slash-separated file path.
func ValidatePath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: empty", ErrBadPath)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%w %q: absolute", ErrBadPath, p)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("%w %q: contains NUL", ErrBadPath, p)
	case strings.Contains(p, `\`):
		return fmt.Errorf("%w %q: contains a backslash", ErrBadPath, p)
	case path.Clean(p) != p:
		return fmt.Errorf("%w %q: not clean (use %q)", ErrBadPath, p, path.Clean(p))
	}
	for _, c := range strings.Split(p, "/") {
		if c == "." || c == ".." || strings.EqualFold(c, ".git") {
			return fmt.Errorf("%w %q: component %q not allowed", ErrBadPath, p, c)
		}
	}
	return nil
}

// dirEdit collects the edits below one directory.
type dirEdit struct {
	files map[string]*scm.FileChange
	dirs  map[string]*dirEdit
}

func newDirEdit() *dirEdit {
	return &dirEdit{files: map[string]*scm.FileChange{}, dirs: map[string]*dirEdit{}}
}

// applyChanges writes the blobs and trees for changes on top of root (zero hash = empty tree)
// and returns the new root tree and the paths whose content or mode actually changed.
func applyChanges(s storer.EncodedObjectStorer, root plumbing.Hash, changes []scm.FileChange) (plumbing.Hash, []string, error) {
	top := newDirEdit()
	seen := map[string]bool{}
	for i := range changes {
		c := &changes[i]
		if err := ValidatePath(c.Path); err != nil {
			return plumbing.ZeroHash, nil, fmt.Errorf("change %d: %w", i, err)
		}
		if seen[c.Path] {
			return plumbing.ZeroHash, nil, fmt.Errorf("change %d: %w %q: listed twice", i, ErrBadPath, c.Path)
		}
		seen[c.Path] = true
		parts := strings.Split(c.Path, "/")
		d := top
		for _, p := range parts[:len(parts)-1] {
			if _, clash := d.files[p]; clash {
				return plumbing.ZeroHash, nil, fmt.Errorf("change %d: %w %q: a parent is also written as a file", i, ErrBadPath, c.Path)
			}
			next := d.dirs[p]
			if next == nil {
				next = newDirEdit()
				d.dirs[p] = next
			}
			d = next
		}
		name := parts[len(parts)-1]
		if _, clash := d.dirs[name]; clash {
			return plumbing.ZeroHash, nil, fmt.Errorf("change %d: %w %q: also used as a directory", i, ErrBadPath, c.Path)
		}
		d.files[name] = c
	}
	var changed []string
	h, _, err := writeDir(s, root, "", top, &changed)
	if err != nil {
		return plumbing.ZeroHash, nil, err
	}
	sort.Strings(changed)
	return h, changed, nil
}

// writeDir applies e to the tree at h (zero = new directory). empty reports that the directory
// ended up with no entries.
func writeDir(s storer.EncodedObjectStorer, h plumbing.Hash, prefix string, e *dirEdit, changed *[]string) (plumbing.Hash, bool, error) {
	entries := map[string]object.TreeEntry{}
	if !h.IsZero() {
		t, err := object.GetTree(s, h)
		if err != nil {
			return plumbing.ZeroHash, false, fmt.Errorf("read tree %s: %w", prefix, err)
		}
		for _, te := range t.Entries {
			entries[te.Name] = te
		}
	}
	for name, c := range e.files {
		full := prefix + name
		old, exists := entries[name]
		if exists && old.Mode == filemode.Dir {
			return plumbing.ZeroHash, false, fmt.Errorf("%w %q: is a directory", ErrBadPath, full)
		}
		if c.Delete {
			if exists {
				delete(entries, name)
				*changed = append(*changed, full)
			}
			continue
		}
		bh, err := writeBlob(s, c.Content)
		if err != nil {
			return plumbing.ZeroHash, false, fmt.Errorf("write %s: %w", full, err)
		}
		mode := filemode.Regular
		if exists && (old.Mode == filemode.Executable || old.Mode == filemode.Regular) {
			mode = old.Mode
		}
		if exists && old.Hash == bh && old.Mode == mode {
			continue
		}
		entries[name] = object.TreeEntry{Name: name, Mode: mode, Hash: bh}
		*changed = append(*changed, full)
	}
	for name, sub := range e.dirs {
		full := prefix + name
		old, exists := entries[name]
		var oldHash plumbing.Hash
		if exists {
			if old.Mode != filemode.Dir {
				onlyDeletes := true
				for _, c := range sub.files {
					onlyDeletes = onlyDeletes && c.Delete
				}
				if onlyDeletes && len(sub.dirs) == 0 {
					continue // deleting below a file: nothing there
				}
				return plumbing.ZeroHash, false, fmt.Errorf("%w %q: is a file, not a directory", ErrBadPath, full)
			}
			oldHash = old.Hash
		}
		nh, empty, err := writeDir(s, oldHash, full+"/", sub, changed)
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		switch {
		case empty:
			delete(entries, name)
		default:
			entries[name] = object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: nh}
		}
	}
	if len(entries) == 0 && prefix != "" {
		return plumbing.ZeroHash, true, nil
	}
	list := make([]object.TreeEntry, 0, len(entries))
	for _, te := range entries {
		list = append(list, te)
	}
	nh, err := writeTree(s, list)
	return nh, len(list) == 0, err
}

// writeTree sorts entries the way git does (a directory sorts as if its name ended in "/") and
// stores the tree.
func writeTree(s storer.EncodedObjectStorer, entries []object.TreeEntry) (plumbing.Hash, error) {
	key := func(te object.TreeEntry) string {
		if te.Mode == filemode.Dir {
			return te.Name + "/"
		}
		return te.Name
	}
	sort.Slice(entries, func(i, j int) bool { return key(entries[i]) < key(entries[j]) })
	t := &object.Tree{Entries: entries}
	o := s.NewEncodedObject()
	if err := t.Encode(o); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(o)
}

func writeBlob(s storer.EncodedObjectStorer, data []byte) (plumbing.Hash, error) {
	o := s.NewEncodedObject()
	o.SetType(plumbing.BlobObject)
	o.SetSize(int64(len(data)))
	w, err := o.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(data); err != nil {
		_ = w.Close()
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(o)
}

func readBlob(s storer.EncodedObjectStorer, h plumbing.Hash) ([]byte, error) {
	b, err := object.GetBlob(s, h)
	if err != nil {
		return nil, err
	}
	r, err := b.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// diffTrees lists the file paths that differ between trees a and b (zero hash = empty tree),
// descending only into subtrees whose hashes differ.
func diffTrees(s storer.EncodedObjectStorer, a, b plumbing.Hash, prefix string, out *[]string) error {
	if a == b {
		return nil
	}
	ea, err := treeEntries(s, a)
	if err != nil {
		return err
	}
	eb, err := treeEntries(s, b)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for n := range ea {
		names[n] = true
	}
	for n := range eb {
		names[n] = true
	}
	for n := range names {
		x, okx := ea[n]
		y, oky := eb[n]
		if okx && oky && x.Hash == y.Hash && x.Mode == y.Mode {
			continue
		}
		xdir := okx && x.Mode == filemode.Dir
		ydir := oky && y.Mode == filemode.Dir
		var xh, yh plumbing.Hash
		if xdir {
			xh = x.Hash
		}
		if ydir {
			yh = y.Hash
		}
		if xdir || ydir {
			if err := diffTrees(s, xh, yh, prefix+n+"/", out); err != nil {
				return err
			}
		}
		if (okx && !xdir) || (oky && !ydir) {
			*out = append(*out, prefix+n)
		}
	}
	return nil
}

func treeEntries(s storer.EncodedObjectStorer, h plumbing.Hash) (map[string]object.TreeEntry, error) {
	m := map[string]object.TreeEntry{}
	if h.IsZero() {
		return m, nil
	}
	t, err := object.GetTree(s, h)
	if err != nil {
		return nil, err
	}
	for _, te := range t.Entries {
		m[te.Name] = te
	}
	return m, nil
}
