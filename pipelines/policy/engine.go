package policy

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// Engine serves the policies of a directory and reloads them when a file changes. A reload
// that fails keeps the last good set and logs why.
type Engine struct {
	dir  string
	log  *slog.Logger
	cur  atomic.Pointer[Set]
	seen string // fingerprint of the files the current set was loaded from
}

// Open loads dir's policies; a bad policy set is an error here (there is no good set yet).
func Open(ctx context.Context, dir string, log *slog.Logger) (*Engine, error) {
	if log == nil {
		log = slog.Default()
	}
	e := &Engine{dir: dir, log: log}
	fp, err := fingerprint(dir)
	if err != nil {
		return nil, err
	}
	s, err := Load(ctx, dir)
	if err != nil {
		return nil, err
	}
	e.cur.Store(s)
	e.seen = fp
	return e, nil
}

// Has reports whether the current set covers point p.
func (e *Engine) Has(p Point) bool { return e.cur.Load().Has(p) }

// Evaluate evaluates point p with the current set.
func (e *Engine) Evaluate(ctx context.Context, p Point, input any) (Decision, error) {
	return e.cur.Load().Evaluate(ctx, p, input)
}

// Current is the set in use.
func (e *Engine) Current() *Set { return e.cur.Load() }

// Reload loads the directory again if a policy file changed (name, size or mtime). It
// reports whether a new set is in use; on error the last good set stays.
func (e *Engine) Reload(ctx context.Context) (bool, error) {
	fp, err := fingerprint(e.dir)
	if err != nil {
		return false, err
	}
	if fp == e.seen {
		return false, nil
	}
	s, err := Load(ctx, e.dir)
	if err != nil {
		e.seen = fp // log a broken file once, not on every poll
		return false, err
	}
	e.cur.Store(s)
	e.seen = fp
	return true, nil
}

// Watch polls the directory every interval until ctx ends (a stat per file: cheap, and it
// works on every filesystem, including ConfigMap volumes that swap symlinks).
func (e *Engine) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := e.Reload(ctx)
		switch {
		case err != nil:
			e.log.Error("policies not reloaded; the last good set stays in use", "dir", e.dir, "err", err)
		case changed:
			e.log.Info("policies reloaded", "dir", e.dir, "files", len(e.cur.Load().Files))
		}
	}
}

func fingerprint(dir string) (string, error) {
	files, err := PolicyFiles(dir)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, f := range files {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrPolicy, err)
		}
		fmt.Fprintf(&b, "%s %d %d\n", f, fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String(), nil
}
