package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/steps/fileedit"
)

// TypeReadReleaseValues reads the values an environment tracks in its release files at one
// commit of the release branch, and with `before` also which files the commits before..commit
// changed (the forge's compare API: Bitbucket push webhooks list no files). The controller holds
// no forge credentials, so when a release branch moves (a hand commit, or a merge prflow made)
// the environments model dispatches this job to a worker, under reserved ids, like the
// TriggerPaths check of a push trigger. It only reads, so a redelivered job is harmless.
const TypeReadReleaseValues = "ReadReleaseValues"

// Bounds of one read: the environments of a branch track a few files and keys each.
const (
	MaxReadFiles      = 64
	MaxReadKeys       = 256
	MaxReadValueBytes = 4 << 10 // a larger value is reported by size, not carried in the result
	maxReadChanged    = 1000
)

func init() {
	Register(Definition{
		Type:     TypeReadReleaseValues,
		Priors:   NoPriors,
		Internal: true,
		New:      func() Step { return StepFunc(runReadReleaseValues) },
		Config:   readValuesConfig{},
	})
}

// readValuesConfig is what a ReadReleaseValues job takes.
type readValuesConfig struct {
	Connector string    `input:"connector" doc:"the worker connector (SCM credentials) of the repo"`
	Repo      string    `input:"repo" doc:"the repo, e.g. acme/release"`
	Commit    string    `input:"commit,required" doc:"the release-branch commit to read at"`
	Before    string    `input:"before" doc:"with it: also list the files before..commit changed"`
	Files     []string  `input:"files" doc:"the files to read"`
	Keys      []ReadKey `input:"keys" doc:"the keys to look up"`
}

// ReadKey is one key a ReadReleaseValues job looks up.
type ReadKey struct {
	File string `json:"file" input:"file,required"`
	Key  string `json:"key" input:"key,required"`
}

// ReadValue is what one key holds at the commit read.
type ReadValue struct {
	Key   string `json:"key"`
	Found bool   `json:"found"`
	Value any    `json:"value,omitempty"`
	Error string `json:"error,omitempty"` // the key is not a valid path, or the file not parseable there
}

// ReadFile is one file as the commit holds it.
type ReadFile struct {
	File   string      `json:"file"`
	Exists bool        `json:"exists"`
	Error  string      `json:"error,omitempty"` // the file exists but is not JSON/YAML prflow can read
	Values []ReadValue `json:"values,omitempty"`
}

// ReadResult is the outputs of a ReadReleaseValues job.
type ReadResult struct {
	Repo    string     `json:"repo"`
	Commit  string     `json:"commit"`
	Files   []ReadFile `json:"files"`
	Before  string     `json:"before,omitempty"`
	Changed []string   `json:"changed,omitempty"` // with Before: the files before..commit changed
	// ChangedTruncated: the forge listed only part of the comparison (Changed is that part).
	ChangedTruncated bool `json:"changedTruncated,omitempty"`
}

// DecodeReadResult reads a ReadReleaseValues job's outputs back.
func DecodeReadResult(outputs map[string]any) (*ReadResult, error) {
	b, err := json.Marshal(outputs)
	if err != nil {
		return nil, err
	}
	var r ReadResult
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s outputs: %w", TypeReadReleaseValues, err)
	}
	return &r, nil
}

func runReadReleaseValues(ctx context.Context, sc *Context) (Result, error) {
	cfg, err := Decode[readValuesConfig](sc.Inputs, false)
	if err != nil {
		return Result{}, Terminal(err)
	}
	for _, f := range [][2]string{{"connector", cfg.Connector}, {"repo", cfg.Repo}, {"commit", cfg.Commit}} {
		if f[1] == "" {
			return Result{}, Terminalf("%s: required", f[0])
		}
	}
	for i, k := range cfg.Keys {
		if k.File == "" || k.Key == "" {
			return Result{}, Terminalf("keys[%d]: want {file, key} with both set", i)
		}
	}
	v := map[string]string{"connector": cfg.Connector, "repo": cfg.Repo, "commit": cfg.Commit}
	before, files, keys := cfg.Before, cfg.Files, cfg.Keys
	byFile := map[string][]string{}
	for _, k := range keys {
		if _, ok := byFile[k.File]; !ok && !contains(files, k.File) {
			files = append(files, k.File)
		}
		byFile[k.File] = append(byFile[k.File], k.Key)
	}
	switch {
	case len(files) == 0 && before == "":
		return Result{}, Terminalf("files: nothing to read (no files or keys given)")
	case len(files) > MaxReadFiles:
		return Result{}, Terminalf("files: %d files, at most %d per read", len(files), MaxReadFiles)
	case len(keys) > MaxReadKeys:
		return Result{}, Terminalf("keys: %d keys, at most %d per read", len(keys), MaxReadKeys)
	}
	for i, f := range files {
		if err := scm.CheckRead(v["commit"], f); err != nil {
			return Result{}, Terminalf("files[%d] %q: %v", i, f, err)
		}
	}
	p, err := scmFor(ctx, sc, v["connector"])
	if err != nil {
		return Result{}, err
	}
	repo := scm.Repo(v["repo"])
	out := ReadResult{Repo: v["repo"], Commit: v["commit"], Files: []ReadFile{}}
	if before != "" && before != scm.ZeroSHA {
		cmp, ok := p.(scm.Comparer)
		if !ok {
			return Result{}, Terminalf("connector %s: the %s driver cannot compare commits", v["connector"], p.Name())
		}
		changed, err := cmp.ChangedBetween(ctx, repo, before, v["commit"])
		truncated := errors.Is(err, scm.ErrTruncated)
		if err != nil && !truncated {
			return Result{}, classify(err, fmt.Sprintf("compare %s..%s of %s", shortID(before), shortID(v["commit"]), repo))
		}
		if len(changed) > maxReadChanged {
			changed, truncated = changed[:maxReadChanged], true
		}
		out.Before, out.Changed, out.ChangedTruncated = before, changed, truncated
	}
	for _, f := range files {
		rf := ReadFile{File: f}
		data, err := p.ReadFile(ctx, repo, v["commit"], f)
		switch {
		case errors.Is(err, scm.ErrNotFound):
			// The file is gone at this commit (a hand commit deleted it): a fact, not a failure.
		case err != nil:
			return Result{}, classify(err, fmt.Sprintf("read %s at %s of %s", f, shortID(v["commit"]), repo))
		default:
			rf.Exists = true
			rf.Values, rf.Error = lookupValues(f, data, byFile[f])
		}
		out.Files = append(out.Files, rf)
	}
	sc.Log.Info("release values read", "repo", v["repo"], "commit", v["commit"], "files", len(files), "keys", len(keys), "changed", len(out.Changed))
	b, err := json.Marshal(out)
	if err != nil {
		return Result{}, Terminal(err)
	}
	var outputs map[string]any
	if err := json.Unmarshal(b, &outputs); err != nil {
		return Result{}, Terminal(err)
	}
	return Done(outputs), nil
}

// lookupValues reads keys in a file's bytes; a file prflow cannot parse is an error of that
// file (the others are still read).
func lookupValues(path string, data []byte, keys []string) ([]ReadValue, string) {
	f, err := fileedit.FormatFor(path)
	if err != nil {
		return nil, err.Error()
	}
	out := make([]ReadValue, 0, len(keys))
	for _, k := range keys {
		val, found, err := fileedit.Lookup(f, data, k, fileedit.Document{})
		rv := ReadValue{Key: k, Found: found}
		switch {
		case err != nil:
			rv.Found, rv.Error = false, err.Error()
		case found:
			if b, _ := json.Marshal(val); len(b) > MaxReadValueBytes {
				rv.Error = fmt.Sprintf("value of %d bytes, more than the %d a read reports", len(b), MaxReadValueBytes)
			} else {
				rv.Value = val
			}
		}
		out = append(out, rv)
	}
	return out, ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func shortID(sha string) string { return sha[:min(len(sha), 12)] }
