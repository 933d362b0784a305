package gitengine

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"sort"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// treeFS is a read-only io/fs view of a commit's tree, read straight from the object store:
// edits read the few files they change without checking out the whole repository.
type treeFS struct {
	s    storer.EncodedObjectStorer
	root *object.Tree
	when time.Time
}

var (
	_ fs.ReadFileFS = (*treeFS)(nil)
	_ fs.StatFS     = (*treeFS)(nil)
	_ fs.ReadDirFS  = (*treeFS)(nil)
)

func (t *treeFS) lookup(op, name string) (*object.TreeEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return &object.TreeEntry{Name: ".", Mode: filemode.Dir, Hash: t.root.Hash}, nil
	}
	e, err := t.root.FindEntry(name)
	if err != nil {
		if errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound) {
			return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		return nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	return e, nil
}

func (t *treeFS) Stat(name string) (fs.FileInfo, error) {
	e, err := t.lookup("stat", name)
	if err != nil {
		return nil, err
	}
	return t.info(e)
}

func (t *treeFS) info(e *object.TreeEntry) (fs.FileInfo, error) {
	fi := &entryInfo{name: e.Name, mode: e.Mode, when: t.when}
	if e.Mode != filemode.Dir && e.Mode != filemode.Submodule {
		o, err := t.s.EncodedObject(plumbing.AnyObject, e.Hash)
		if err != nil {
			return nil, err
		}
		fi.size = o.Size()
	}
	return fi, nil
}

func (t *treeFS) ReadFile(name string) ([]byte, error) {
	e, err := t.lookup("read", name)
	if err != nil {
		return nil, err
	}
	if e.Mode == filemode.Dir || e.Mode == filemode.Submodule {
		return nil, &fs.PathError{Op: "read", Path: name, Err: errors.New("is a directory")}
	}
	data, err := readBlob(t.s, e.Hash)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	return data, nil
}

func (t *treeFS) ReadDir(name string) ([]fs.DirEntry, error) {
	e, err := t.lookup("readdir", name)
	if err != nil {
		return nil, err
	}
	if e.Mode != filemode.Dir {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a directory")}
	}
	tr, err := object.GetTree(t.s, e.Hash)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	out := make([]fs.DirEntry, 0, len(tr.Entries))
	for i := range tr.Entries {
		te := tr.Entries[i]
		fi, err := t.info(&te)
		if err != nil {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
		}
		out = append(out, fs.FileInfoToDirEntry(fi))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

func (t *treeFS) Open(name string) (fs.File, error) {
	e, err := t.lookup("open", name)
	if err != nil {
		return nil, err
	}
	fi, err := t.info(e)
	if err != nil {
		return nil, err
	}
	if e.Mode == filemode.Dir {
		entries, err := t.ReadDir(name)
		if err != nil {
			return nil, err
		}
		return &dirFile{info: fi, entries: entries}, nil
	}
	data, err := t.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return &blobFile{info: fi, Reader: bytes.NewReader(data)}, nil
}

type entryInfo struct {
	name string
	mode filemode.FileMode
	size int64
	when time.Time
}

func (i *entryInfo) Name() string { return i.name }
func (i *entryInfo) Size() int64  { return i.size }
func (i *entryInfo) Mode() fs.FileMode {
	switch i.mode {
	case filemode.Dir:
		return fs.ModeDir | 0o755
	case filemode.Executable:
		return 0o755
	case filemode.Symlink:
		return fs.ModeSymlink | 0o777
	case filemode.Submodule:
		return fs.ModeDir | fs.ModeIrregular
	}
	return 0o644
}
func (i *entryInfo) ModTime() time.Time { return i.when }
func (i *entryInfo) IsDir() bool        { return i.Mode().IsDir() }
func (i *entryInfo) Sys() any           { return nil }

type blobFile struct {
	info fs.FileInfo
	*bytes.Reader
}

func (f *blobFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *blobFile) Close() error               { return nil }

type dirFile struct {
	info    fs.FileInfo
	entries []fs.DirEntry
	pos     int
}

func (d *dirFile) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *dirFile) Close() error               { return nil }
func (d *dirFile) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.Name(), Err: errors.New("is a directory")}
}
func (d *dirFile) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.entries[d.pos:]
	if n <= 0 {
		d.pos = len(d.entries)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(rest))
	d.pos += n
	return rest[:n], nil
}
