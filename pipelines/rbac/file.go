package rbac

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// File is a policy file that reloads itself when it changes: every Policy call looks at the
// file (at most once per recheck) and parses it again when its size, time or content moved. A
// broken edit keeps the last good policy and is logged once with its line numbers.
type File struct {
	path string
	log  *slog.Logger
	cur  atomic.Pointer[Policy]

	mu      sync.Mutex // one reload at a time
	stat    fileStamp
	data    []byte
	checked atomic.Int64 // unix nanos of the last look at the file
	lastErr atomic.Pointer[error]
}

// recheck bounds how often the file is looked at (a stat). Zero: every request looks, so the
// request after an edit is decided by it (a stat costs microseconds, a request far more).
const recheck = 0

type fileStamp struct {
	size int64
	mod  time.Time
	ino  os.FileInfo
}

// Load reads the policy file path; its errors are *LineError (joined).
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rbac policy: %w", err)
	}
	return Parse(path, data)
}

// OpenFile loads path, refusing a file that does not load; later edits reload it.
func OpenFile(path string, log *slog.Logger) (*File, error) {
	if log == nil {
		log = slog.Default()
	}
	f := &File{path: path, log: log}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rbac policy: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rbac policy: %w", err)
	}
	p, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	f.cur.Store(p)
	f.stat, f.data = stampOf(fi), data
	f.checked.Store(time.Now().UnixNano())
	return f, nil
}

func stampOf(fi os.FileInfo) fileStamp {
	return fileStamp{size: fi.Size(), mod: fi.ModTime(), ino: fi}
}

func (s fileStamp) same(fi os.FileInfo) bool {
	return s.ino != nil && s.size == fi.Size() && s.mod.Equal(fi.ModTime()) && os.SameFile(s.ino, fi)
}

// Path is the policy file's path.
func (f *File) Path() string { return f.path }

// Policy is the current policy, reloaded first when the file changed.
func (f *File) Policy() *Policy {
	now := time.Now().UnixNano()
	if last := f.checked.Load(); now-last >= recheck && f.checked.CompareAndSwap(last, now) {
		f.Reload()
	}
	return f.cur.Load()
}

// Err is why the file's newest content is not in use (nil when it is).
func (f *File) Err() error {
	if e := f.lastErr.Load(); e != nil {
		return *e
	}
	return nil
}

// Reload looks at the file now and parses it again if it changed; it reports whether a new
// policy is in use. A file that does not load keeps the last good policy.
func (f *File) Reload() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	fi, err := os.Stat(f.path)
	if err != nil {
		f.fail(fmt.Errorf("rbac policy: %w (keeping the last good policy)", err))
		return false
	}
	if f.stat.same(fi) {
		return false
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		f.fail(fmt.Errorf("rbac policy: %w (keeping the last good policy)", err))
		return false
	}
	f.stat = stampOf(fi)
	if bytes.Equal(data, f.data) {
		return false
	}
	f.data = data
	p, err := Parse(f.path, data)
	if err != nil {
		f.fail(err)
		return false
	}
	f.cur.Store(p)
	f.lastErr.Store(nil)
	f.log.Info("rbac policy reloaded", "file", f.path, "lines", len(p.Lines), "default", p.def)
	return true
}

func (f *File) fail(err error) {
	prev := f.Err()
	f.lastErr.Store(&err)
	if prev == nil || prev.Error() != err.Error() {
		f.log.Error("rbac policy not reloaded: the last good policy stays in force", "file", f.path, "err", err)
	}
}
