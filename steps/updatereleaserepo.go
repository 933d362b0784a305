package steps

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/steps/fileedit"
	"github.com/prflow/prflow/steps/spelling"
	"github.com/prflow/prflow/steps/template"
)

// UpdateReleaseRepo sets values in the release repo's config files for every target cluster
// of the stage's environment, in one commit on one branch, and opens one PR. Edits keep
// everything they do not change (comments, order, quoting). It is idempotent: the branch is
// derived from run+stage+step, and a re-run finds its branch, commit and PR.
func init() {
	Register(Definition{
		Type:      "UpdateReleaseRepo",
		Priors:    NoPriors,
		Aliases:   []string{"GitOpsUpdateReleaseRepo"},
		New:       func() Step { return StepFunc(runUpdateReleaseRepo) },
		PerTarget: []string{"filePath", "filePaths", "variables", "document"},
		Config:    releaseConfig{},
		Validate:  validateRelease,
	})
}

// releaseConfig is UpdateReleaseRepo's `with:`. The releaseTarget inputs are evaluated per
// target cluster and arrive as Targets (PerTarget).
type releaseConfig struct {
	Connector  string `input:"connector,required" doc:"the worker connector of the release repo"`
	Repo       string `input:"repo,required" doc:"the release repo, e.g. acme/release"`
	BaseBranch string `input:"baseBranch,default=main" doc:"the branch the PR targets"`
	releaseTarget
	Create                bool     `input:"create,default=false" doc:"files and keys may be new: without it a file or key that does not exist is refused (a typo)"`
	HarnessCreate         bool     `input:"harnessCreate,default=false" doc:"set by the Harness importer: create missing files and keys as Harness does, listed in the created output and as a run warning"`
	CommitMessage         string   `input:"commitMessage"`
	PRTitle               string   `input:"prTitle"`
	PRBody                string   `input:"prBody"`
	Labels                []string `input:"labels" doc:"PR labels"`
	Reviewers             []string `input:"reviewers" doc:"PR reviewers"`
	Draft                 bool     `input:"draft,default=false" doc:"open the PR as a draft"`
	AllowEmptyCommit      bool     `input:"allowEmptyCommit,default=false"`
	AllowNoFilesChanged   bool     `input:"allowNoFilesChanged,default=false" doc:"succeed without a PR when every value already matches"`
	IgnoreMissingFiles    bool     `input:"ignoreMissingFiles,default=false"`
	IgnoreMissingValues   bool     `input:"ignoreMissingValues,default=false"`
	SkipPipelineVariables bool     `input:"skipPipelineVariables,default=false" doc:"write only this step's variables, not the service's and environment's"`
	WaitForMerge          bool     `input:"waitForMerge,default=false" doc:"succeed only when someone has merged the PR"`
	restraintInputs

	Targets []releaseTarget `input:"targets,internal"`
}

// releaseTarget is what UpdateReleaseRepo writes on one target cluster.
type releaseTarget struct {
	FilePath  string            `input:"filePath" doc:"the config file, per target: envs/<+env.name>/config.json"`
	FilePaths []string          `input:"filePaths" doc:"several config files"`
	Variables []releaseVariable `input:"variables" doc:"the keys to set (dotted paths) and their values"`
	Document  documentSel       `input:"document" doc:"the YAML document to edit in a multi-document file: {index: N} or {kind: K, name: N}"`
	// The target, set by the controller on each of Targets.
	Env      string `input:"env,internal"`
	Cluster  string `input:"cluster,internal"`
	EnvGroup string `input:"envgroup,internal"`
}

type releaseVariable struct {
	Name     string      `input:"name,required" doc:"the key, e.g. image.tag or env[0].value"`
	Type     varType     `input:"type,default=String" doc:"String keeps the value's text as written"`
	Value    any         `input:"value,typedby=type"`
	Create   bool        `input:"create,default=false" doc:"the key may be new: without it a key the file lacks is refused (a typo)"`
	Document documentSel `input:"document" doc:"the YAML document to edit in a multi-document file: {index: N} or {kind: K, name: N}"`
}

// varType is a variable's type: String, Number, Boolean, Raw (or Object), any case; checked
// in validateRelease, which names the variable.
type varType string

func (varType) InputShape() Input {
	return Input{Type: InputString, Enum: []string{fileedit.TypeString, fileedit.TypeNumber, fileedit.TypeBoolean, fileedit.TypeRaw, "Object", "string", "number", "boolean", "raw", "object"}}
}

func (t *varType) DecodeInput(v any, field string, _ bool) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("%s: want a string, got %T", field, v)
	}
	*t = varType(s)
	return nil
}

// validateRelease is UpdateReleaseRepo's load-time check of what declarations cannot say.
func validateRelease(in map[string]any) error {
	c, err := Decode[releaseConfig](in, true)
	if err != nil {
		return err
	}
	for _, f := range [][2]string{{"connector", c.Connector}, {"repo", c.Repo}} {
		if f[1] == "" {
			return fmt.Errorf("%s: required", f[0])
		}
	}
	if c.FilePath == "" && len(c.FilePaths) == 0 && !hasExprIn(in, "filePaths") {
		return fmt.Errorf("filePath: required (e.g. \"envs/<+env.name>/config.json\")")
	}
	if err := checkFilePaths(c.releaseTarget); err != nil {
		return err
	}
	for i, v := range c.Variables {
		if v.Name == "" {
			return fmt.Errorf("variables[%d].name: required", i)
		}
		if !template.Contains(v.Name) {
			if err := fileedit.CheckKey(v.Name); err != nil {
				var ke *fileedit.KeyError
				if errors.As(err, &ke) {
					err = errors.New(ke.Detail)
				}
				return &InputError{Field: fmt.Sprintf("variables[%d].name", i), Err: fmt.Errorf("%q: %w", v.Name, err)}
			}
		}
		if t := string(v.Type); t != "" && !template.Contains(t) {
			switch strings.ToLower(t) {
			case "string", "number", "boolean", "raw", "object":
			case "secret":
				return fmt.Errorf("variables[%d] (%v): type Secret is not written to release files", i, v.Name)
			default:
				return fmt.Errorf("variables[%d].type: %q is not String, Number, Boolean or Raw", i, t)
			}
		}
	}
	return nil
}

// checkFilePaths refuses at load what the run would refuse: a file the step cannot edit
// (values.txt) or a path that leaves the repo. Expressions stand for any text, so only the
// parts written out are judged: the extension after the last expression, and the whole
// path when it has none.
func checkFilePaths(t releaseTarget) error {
	check := func(field, p string) error {
		if template.Contains(p) {
			tail := p
			if i := max(strings.LastIndex(p, "}}"), strings.LastIndex(p, ">")); i >= 0 {
				tail = p[i+1:]
			}
			// A tail with a slash holds the whole file name, one with a dot its extension.
			if strings.ContainsAny(tail, "/.") {
				if _, err := fileedit.FormatFor(tail); err != nil {
					return &InputError{Field: field, Err: fmt.Errorf("%q: %w", p, err)}
				}
			}
			if strings.HasPrefix(p, "/") || strings.Contains("/"+p+"/", "/../") {
				return inputErr(field, "%q: want a path relative to the repo root, without ..", p)
			}
			return nil
		}
		if _, err := safePath(p); err != nil {
			return &InputError{Field: field, Err: err}
		}
		if _, err := fileedit.FormatFor(p); err != nil {
			return &InputError{Field: field, Err: err}
		}
		return nil
	}
	if t.FilePath != "" {
		if err := check("filePath", t.FilePath); err != nil {
			return err
		}
	}
	for i, s := range t.FilePaths {
		if err := check(fmt.Sprintf("filePaths[%d]", i), s); err != nil {
			return err
		}
	}
	return nil
}

type fileEdit struct {
	path    string
	changes []editChange
}

// editChange is one value to set and the YAML document it goes to (the step's `document`
// input, or the variable's own); the zero Document is refused for multi-document files.
type editChange struct {
	fileedit.Change
	doc    fileedit.Document
	create bool // the variable's create: true (the key may be new)
	// was is what the file held at the key before the step (the edits output's old), read
	// by editFiles; its zero value (not looked up) records neither old nor created.
	was priorValue
}

// priorValue is what a change replaced: known once the file was read; found false when the
// change created the key (or the file).
type priorValue struct {
	known, found bool
	value        any
}

// documentInput reads a document selector: {index: N}, {kind: K}, {name: N} or a mix
// ({kind: Deployment, name: web}). At load (static) an expression stands for any value.
func documentInput(v any, field string, static bool) (fileedit.Document, error) {
	var d fileedit.Document
	switch x := v.(type) {
	case nil:
		return d, nil
	case string:
		if static && template.Contains(x) {
			return d, nil
		}
	case map[string]any:
		if len(x) == 0 {
			return d, fmt.Errorf("%s: empty; want {index: N} or {kind: K, name: N}", field)
		}
		for k, e := range x {
			switch k {
			case "index":
				n, err := intInput(e, field+".index", static)
				if err != nil {
					return d, err
				}
				if n < 0 {
					return d, fmt.Errorf("%s.index: %d is negative (documents count from 0)", field, n)
				}
				d.Index = &n
			case "kind", "name":
				s, ok := e.(string)
				if !ok || s == "" {
					return d, fmt.Errorf("%s.%s: want a non-empty string, got %v", field, k, e)
				}
				if k == "kind" {
					d.Kind = s
				} else {
					d.Name = s
				}
			default:
				return d, fmt.Errorf("%s.%s: unknown key (want index, kind or name)", field, k)
			}
		}
		return d, nil
	}
	return d, fmt.Errorf("%s: want {index: N} or {kind: K, name: N}, got %T %v", field, v, v)
}

// documentOutput is documentInput's inverse, for the edits output.
func documentOutput(d fileedit.Document) map[string]any {
	if d.IsZero() {
		return nil
	}
	m := map[string]any{}
	if d.Index != nil {
		m["index"] = *d.Index
	}
	if d.Kind != "" {
		m["kind"] = d.Kind
	}
	if d.Name != "" {
		m["name"] = d.Name
	}
	return m
}

// editFile applies changes to one file's content cur (nil when the file does not exist:
// it is created). Runs of changes aimed at the same document go to fileedit together; each
// run sees the file as the previous one left it.
func editFile(path string, cur []byte, exists bool, changes []editChange, opts fileedit.Options) (out []byte, differs bool, err error) {
	f, err := fileedit.FormatFor(path)
	if err != nil {
		return nil, false, Terminal(err)
	}
	out = cur
	for i := 0; i < len(changes) || (!exists && i == 0); {
		j := i
		var doc fileedit.Document
		if i < len(changes) {
			doc = changes[i].doc
		}
		var run []fileedit.Change
		for ; j < len(changes) && sameDocument(changes[j].doc, doc); j++ {
			run = append(run, changes[j].Change)
		}
		o := opts
		o.Document = doc
		if !exists {
			if out, err = fileedit.Create(f, run, o); err != nil {
				return nil, false, Terminalf("%s: %w", path, err)
			}
			exists, differs = true, true
		} else {
			var ch bool
			if out, ch, err = fileedit.Apply(f, out, run, o); err != nil {
				return nil, false, Terminalf("%s: %w", path, err)
			}
			differs = differs || ch
		}
		i = max(j, i+1)
	}
	return out, differs, nil
}

func sameDocument(a, b fileedit.Document) bool {
	return a.String() == b.String()
}

type urrMemo struct {
	Outputs map[string]any `json:"outputs"`
	PR      int            `json:"pr"`
}

func runUpdateReleaseRepo(ctx context.Context, sc *Context) (Result, error) {
	cfg, err := Decode[releaseConfig](sc.Inputs, false)
	if err != nil {
		return Result{}, Terminal(err)
	}
	connector, repo, base := cfg.Connector, cfg.Repo, orDefault(cfg.BaseBranch, "main")
	p, err := scmFor(ctx, sc, connector)
	if err != nil {
		return Result{}, err
	}
	r := scm.Repo(repo)

	// A parked waitForMerge run: check the PR it opened.
	var memo urrMemo
	if ok, _ := sc.DecodeMemo(&memo); ok && memo.PR > 0 {
		return waitMerged(ctx, sc, p, connector, r, memo)
	}

	edits, err := plannedEdits(sc, cfg)
	if err != nil {
		return Result{}, Terminal(err)
	}
	branch := workBranch(sc, "")
	unlock, err := restraint(ctx, sc, connector, "repo", connector, repo, branch)
	if err != nil {
		return Result{}, err
	}
	defer unlock()

	// A first delivery assumes that no earlier run of this step got anywhere, which is the
	// normal case, and does not look for earlier work: creating the work branch is the check.
	// When the branch turns out to exist (the commit conflicts) or nothing is left to change,
	// the recovering pass looks for the branch and its PR and carries on from there. A repeat
	// (redelivery, retry) starts with that pass, so it makes no commit it would throw away.
	var (
		commit, readRef, parent string
		branchExists            bool
		changedFiles, skipped   []string
		created                 []string
		baseRef                 scm.Ref
	)
	first := 0
	if sc.Repeat() {
		first = 1
	}
	for pass := first; ; pass++ {
		recovering := pass > 0
		branchExists, readRef, parent = false, "", ""
		if recovering {
			br, err := p.Branch(ctx, r, branch)
			switch {
			case err == nil:
				readRef, parent, branchExists = br.SHA, br.SHA, true
				found, err := p.FindPR(ctx, r, branch, base)
				if err == nil {
					sc.Log.Info("found the PR an earlier attempt opened", "pr", found.Number, "url", found.URL)
					files, _ := p.ChangedFiles(ctx, r, found.Number)
					out := prOutputs(found, found.HeadSHA, branch, connector, repo, base, files)
					lookupPrior(ctx, p, r, base, edits, cfg.IgnoreMissingValues)
					out["edits"] = editsOutput(edits, nil)
					return afterPR(ctx, sc, p, connector, r, found, out, cfg.WaitForMerge)
				} else if !errors.Is(err, scm.ErrNotFound) {
					return Result{}, classify(err, fmt.Sprintf("find PR %s → %s in %s", branch, base, repo))
				}
			case !errors.Is(err, scm.ErrNotFound):
				return Result{}, classify(err, fmt.Sprintf("branch %s of %s", branch, repo))
			}
		}
		if baseRef.SHA == "" {
			if baseRef, err = p.Branch(ctx, r, base); err != nil {
				return Result{}, classify(err, fmt.Sprintf("base branch %s of %s", base, repo))
			}
		}
		if !branchExists {
			// Read at the commit the new branch starts from, never at the moving branch name.
			readRef, parent = baseRef.SHA, baseRef.SHA
		}
		var changes []scm.FileChange
		changes, changedFiles, skipped, created, err = editFiles(ctx, sc, p, r, readRef, edits, cfg)
		if err != nil {
			return Result{}, err
		}
		if len(skipped) > 0 {
			sc.Log.Info("missing files skipped (ignoreMissingFiles)", "files", strings.Join(skipped, ", "))
		}
		if len(changes) == 0 && !recovering {
			// Nothing to change on the base: an earlier attempt may still have left a branch
			// (whose changes someone then merged by other means) or a PR; look once.
			if _, err := p.Branch(ctx, r, branch); err == nil {
				continue
			} else if !errors.Is(err, scm.ErrNotFound) {
				return Result{}, classify(err, fmt.Sprintf("branch %s of %s", branch, repo))
			}
		}
		if len(edits) == len(skipped) && len(edits) > 0 && !branchExists {
			return Done(prOutputs(nil, "", "", connector, repo, base, nil)), nil
		}
		commit = parent
		switch {
		case len(changes) > 0:
			msg := cfg.CommitMessage
			if msg == "" {
				msg = fmt.Sprintf("Update %s for %s", strings.Join(changedFiles, ", "), envName(sc))
			}
			commit, err = p.Commit(ctx, r, scm.CommitInput{Branch: branch, Parent: parent, Message: msg, Changes: changes})
			if err != nil {
				if !recovering && errors.Is(err, scm.ErrConflict) {
					sc.Log.Info("the work branch exists already (an earlier attempt); looking for its commit and PR", "branch", branch)
					continue
				}
				return Result{}, classify(err, fmt.Sprintf("commit to %s of %s", branch, repo))
			}
			sc.Log.Info("committed", "branch", branch, "commit", commit, "files", strings.Join(changedFiles, ", "))
		case branchExists && parent != baseRef.SHA:
			// An earlier attempt committed and died before opening the PR.
			sc.Log.Info("branch already holds the changes; opening its PR", "branch", branch)
		case cfg.AllowNoFilesChanged:
			sc.Log.Info("all values already match the release repo; nothing to do")
			return Done(prOutputs(nil, "", "", connector, repo, base, nil)), nil
		case cfg.AllowEmptyCommit:
			commit, err = p.Commit(ctx, r, scm.CommitInput{Branch: branch, Parent: parent, Message: "Empty commit (allowEmptyCommit)"})
			if err != nil {
				return Result{}, classify(err, fmt.Sprintf("empty commit to %s of %s", branch, repo))
			}
		case !branchExists && setsSomething(edits, skipped, cfg.IgnoreMissingValues):
			// Every value is already on the base (a re-run of a promotion that failed after
			// its merge): no PR. commitId stays empty, as this run made no commit (nothing
			// for a rollback to revert); revision is the base head, which holds the values:
			// MergePR passes it on and GitOpsSync requires the apps at a revision containing it.
			sc.Log.Info("every value is already in the release repo: already promoted", "base", base, "commit", baseRef.SHA)
			out := prOutputs(nil, "", "", connector, repo, base, nil)
			out["alreadyPromoted"], out["revision"] = true, baseRef.SHA
			out["edits"] = editsOutput(edits, skipped)
			return Done(out), nil
		default:
			return Fail(fmt.Sprintf("no files changed: every value already matches in %s (set allowNoFilesChanged: true to pass)", strings.Join(pathsOf(edits), ", "))), nil
		}
		break
	}
	if len(changedFiles) == 0 && branchExists {
		changedFiles = pathsOf(edits)
	}
	title := cfg.PRTitle
	if title == "" {
		title = fmt.Sprintf("prflow: %s / %s: update %s", sc.Pipeline, sc.Stage, envName(sc))
	}
	body := cfg.PRBody
	if body == "" {
		body = fmt.Sprintf("Opened by prflow run %s (pipeline %s, stage %s, step %s).\n\nFiles:\n- %s\n",
			sc.RunID, sc.Pipeline, sc.Stage, sc.StepID, strings.Join(changedFiles, "\n- "))
	}
	pr, err := p.OpenPR(ctx, r, scm.NewPR{Title: title, Body: body, Head: branch, Base: base, Labels: cfg.Labels, Draft: cfg.Draft, Reviewers: cfg.Reviewers})
	if err != nil {
		return Result{}, classify(err, "open PR "+branch+" → "+base)
	}
	sc.Log.Info("opened PR", "pr", pr.Number, "url", pr.URL)
	out := prOutputs(pr, commit, branch, connector, repo, base, changedFiles)
	out["edits"] = editsOutput(edits, skipped)
	if len(created) > 0 {
		out["created"] = toAny(created)
	}
	res, err := afterPR(ctx, sc, p, connector, r, pr, out, cfg.WaitForMerge)
	if len(created) > 0 && cfg.HarnessCreate && err == nil && res.Status != Failed {
		// Harness creates what is missing without a word; an imported pipeline keeps that, but
		// a mistyped key or file must not go unnoticed: the run carries a warning.
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s/%s created what %s did not have (Harness behaviour; set create: true, or fix a typo): %s",
			sc.Stage, sc.StepID, repo, strings.Join(created, "; ")))
	}
	return res, err
}

// editFiles reads every file of edits at ref and applies its changes; it returns the files
// that change, their paths, the missing files skipped under ignoreMissingFiles, and what the
// edits create (new files and keys). A file or key that does not exist is refused, naming
// the closest existing one, unless create allows it (the step's, or the variable's for a
// key), or harnessCreate (a Harness import) creates it as Harness does. Every refusal comes
// before any commit.
func editFiles(ctx context.Context, sc *Context, p scm.Provider, r scm.Repo, ref string, edits []fileEdit, cfg releaseConfig) (changes []scm.FileChange, changed, skipped, created []string, err error) {
	opts := fileedit.Options{IgnoreMissingValues: cfg.IgnoreMissingValues}
	mayCreate := cfg.Create || cfg.HarnessCreate
	for _, e := range edits {
		if _, err := fileedit.FormatFor(e.path); err != nil {
			return nil, nil, nil, nil, Terminal(err)
		}
		cur, err := p.ReadFile(ctx, r, ref, e.path)
		exists := true
		switch {
		case errors.Is(err, scm.ErrNotFound):
			if cfg.IgnoreMissingFiles {
				skipped = append(skipped, e.path)
				continue
			}
			if !mayCreate && !allCreate(e.changes) {
				return nil, nil, nil, nil, Terminal(missingFile(ctx, p, r, ref, e.path, edits))
			}
			exists = false
			created = append(created, e.path+" (new file)")
			sc.Log.Info("file does not exist; creating it", "file", e.path)
		case err != nil:
			return nil, nil, nil, nil, classify(err, fmt.Sprintf("read %s@%s of %s", e.path, ref, r))
		}
		o := opts
		o.Created = func(c fileedit.Creation) error {
			if !mayCreate && !changeCreates(e.changes, c.Key) {
				return missingKey(c)
			}
			created = append(created, e.path+": "+c.At)
			return nil
		}
		out, differs, err := editFile(e.path, cur, exists, e.changes, o)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		recordPrior(e.path, cur, exists, e.changes, opts)
		if differs {
			changes = append(changes, scm.FileChange{Path: e.path, Content: out})
			changed = append(changed, e.path)
		}
	}
	return changes, changed, skipped, created, nil
}

// recordPrior notes in each change what the file held at its key before the step (cur, the
// file as read; exists false for a new file). changes shares its backing array with the
// step's edits, which the edits output is written from. A change Apply skips (a missing
// value under ignoreMissingValues) replaces nothing and records nothing.
func recordPrior(path string, cur []byte, exists bool, changes []editChange, opts fileedit.Options) {
	f, err := fileedit.FormatFor(path)
	if err != nil {
		return
	}
	for i := range changes {
		c := &changes[i]
		if opts.IgnoreMissingValues && fileedit.IsMissing(c.Value) {
			continue
		}
		if !exists {
			c.was = priorValue{known: true}
			continue
		}
		v, found, err := fileedit.Lookup(f, cur, c.Key, c.doc)
		if err != nil {
			continue // editFile applied the change, so this does not happen; record nothing
		}
		c.was = priorValue{known: true, found: found, value: v}
	}
}

// lookupPrior records the prior values of edits as the files hold them at ref, for a step
// that found the PR of an earlier attempt and so did not read the files itself. A file it
// cannot read leaves its changes without old values rather than failing the step.
func lookupPrior(ctx context.Context, p scm.Provider, r scm.Repo, ref string, edits []fileEdit, ignoreMissing bool) {
	for _, e := range edits {
		cur, err := p.ReadFile(ctx, r, ref, e.path)
		exists := err == nil
		if err != nil && !errors.Is(err, scm.ErrNotFound) {
			continue
		}
		recordPrior(e.path, cur, exists, e.changes, fileedit.Options{IgnoreMissingValues: ignoreMissing})
	}
}

// allCreate reports whether every change to a file may create its key, so the file may be new.
func allCreate(cs []editChange) bool {
	for _, c := range cs {
		if !c.create {
			return false
		}
	}
	return len(cs) > 0
}

func changeCreates(cs []editChange, key string) bool {
	for _, c := range cs {
		if c.Key == key && c.create {
			return true
		}
	}
	return false
}

// missingKey refuses a change that would add a key the file lacks: most often a typo
// (image.tga), which would otherwise promote nothing and report success.
func missingKey(c fileedit.Creation) error {
	what := fmt.Sprintf("%s does not exist in the file", c.At)
	if c.Item {
		what = fmt.Sprintf("%s is past the end of its list", c.At)
	}
	hint := ""
	if c.Missing != "" {
		if s := spelling.Closest(c.Missing, c.Siblings); s != "" {
			hint = fmt.Sprintf("; did you mean %s?", fileedit.Sibling(c.At, s))
		} else if len(c.Siblings) > 0 {
			hint = fmt.Sprintf(" (the map there has %s)", strings.Join(quoteAll(c.Siblings, 8), ", "))
		}
	}
	return fmt.Errorf("%w%s; set create: true on the variable (or the step) if the key is new", &missingKeyError{c.Key, what}, hint)
}

type missingKeyError struct{ key, what string }

func (e *missingKeyError) Error() string { return fmt.Sprintf("key %q: %s", e.key, e.what) }

func quoteAll(s []string, limit int) []string {
	var out []string
	for i, x := range s {
		if i == limit {
			out = append(out, fmt.Sprintf("… %d more", len(s)-limit))
			break
		}
		out = append(out, strconv.Quote(x))
	}
	return out
}

// missingFile refuses a file that does not exist at ref. The forges list no directories to
// the steps, so the did-you-mean looks at the likely slips: the other YAML/JSON extension,
// and the other files of this step (another environment's path with one typo in it).
func missingFile(ctx context.Context, p scm.Provider, r scm.Repo, ref, path string, edits []fileEdit) error {
	seen := map[string]bool{path: true}
	var cands []string
	add := func(c string) {
		if !seen[c] {
			seen[c] = true
			cands = append(cands, c)
		}
	}
	stem := strings.TrimSuffix(path, filepath.Ext(path))
	for _, ext := range []string{".yaml", ".yml", ".json"} {
		add(stem + ext)
	}
	for _, e := range edits {
		add(e.path)
	}
	var exist []string
	for _, c := range cands {
		if spelling.Closest(path, []string{c}) != "" {
			if _, err := p.ReadFile(ctx, r, ref, c); err == nil {
				exist = append(exist, c)
			}
		}
	}
	hint := ""
	if s := spelling.Closest(path, exist); s != "" {
		hint = fmt.Sprintf("; did you mean %s?", s)
	}
	return fmt.Errorf("%s does not exist in %s at %s%s; set create: true on the step if the file is new (or ignoreMissingFiles: true to skip it)", path, r, short(ref), hint)
}

// editsOutput records what the step set, so MergePR can rebuild the branch on a base that
// moved (another promotion merged first) instead of failing on a textual conflict.
func editsOutput(edits []fileEdit, skipped []string) []any {
	skip := map[string]bool{}
	for _, s := range skipped {
		skip[s] = true
	}
	var out []any
	for _, e := range edits {
		if skip[e.path] {
			continue
		}
		var ch []any
		for _, c := range e.changes {
			m := map[string]any{"key": c.Key, "value": c.Value}
			if d := documentOutput(c.doc); d != nil {
				m["document"] = d
			}
			switch {
			case c.was.known && c.was.found:
				m["old"] = c.was.value
			case c.was.known:
				m["created"] = true
			}
			ch = append(ch, m)
		}
		out = append(out, map[string]any{"file": e.path, "changes": ch})
	}
	return out
}

// EditedKey is one key an UpdateReleaseRepo or RevertPR step set, as its edits output lists it.
type EditedKey struct {
	File, Key string
	Value     any
	// Old is the value the key held before (HasOld); Created: the key (or its file) did not
	// exist. Neither is set when the step did not record it (runs from before old values).
	Old     any
	HasOld  bool
	Created bool
}

// EditedKeys reads a step's edits output for display (the dev summary, the approval card), in
// the order the step wrote it; anything not in that shape is left out.
func EditedKeys(v any) []EditedKey {
	list, _ := v.([]any)
	var out []EditedKey
	for _, f := range list {
		fm, _ := f.(map[string]any)
		file, _ := fm["file"].(string)
		chs, _ := fm["changes"].([]any)
		for _, c := range chs {
			cm, _ := c.(map[string]any)
			key, _ := cm["key"].(string)
			old, hasOld := cm["old"]
			created, _ := cm["created"].(bool)
			out = append(out, EditedKey{File: file, Key: key, Value: cm["value"], Old: old, HasOld: hasOld, Created: created && !hasOld})
		}
	}
	return out
}

// editsFrom reads editsOutput back.
func editsFrom(v any) ([]fileEdit, bool) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, false
	}
	var out []fileEdit
	for _, x := range list {
		m, _ := x.(map[string]any)
		file, _ := m["file"].(string)
		chs, _ := m["changes"].([]any)
		if file == "" {
			return nil, false
		}
		fe := fileEdit{path: file}
		for _, c := range chs {
			cm, _ := c.(map[string]any)
			k, _ := cm["key"].(string)
			doc, err := documentInput(cm["document"], "edits.document", false)
			if err != nil {
				return nil, false
			}
			fe.changes = append(fe.changes, editChange{Change: fileedit.Change{Key: k, Value: cm["value"]}, doc: doc})
		}
		out = append(out, fe)
	}
	return out, true
}

// applyEdits computes the file changes that put edits onto the files at ref.
func applyEdits(ctx context.Context, p scm.Provider, r scm.Repo, ref string, edits []fileEdit, opts fileedit.Options) ([]scm.FileChange, error) {
	var changes []scm.FileChange
	for _, e := range edits {
		cur, err := p.ReadFile(ctx, r, ref, e.path)
		exists := true
		switch {
		case errors.Is(err, scm.ErrNotFound):
			exists = false
		case err != nil:
			return nil, classify(err, "read "+e.path+"@"+ref)
		}
		out, _, err := editFile(e.path, cur, exists, e.changes, opts)
		if err != nil {
			return nil, err
		}
		changes = append(changes, scm.FileChange{Path: e.path, Content: out})
	}
	return changes, nil
}

func afterPR(ctx context.Context, sc *Context, p scm.Provider, connector string, r scm.Repo, pr *scm.PullRequest, out map[string]any, wait bool) (Result, error) {
	if !wait {
		return Done(out), nil
	}
	return waitMerged(ctx, sc, p, connector, r, urrMemo{Outputs: out, PR: pr.Number})
}

// waitMerged parks until the PR is merged (success, commitId = the merge commit) or closed
// unmerged (failure). PR webhooks wake it; a slow poll covers missed webhooks.
func waitMerged(ctx context.Context, sc *Context, p scm.Provider, connector string, r scm.Repo, m urrMemo) (Result, error) {
	pr, err := p.GetPR(ctx, r, m.PR)
	if err != nil {
		return Result{}, classify(err, fmt.Sprintf("get PR #%d", m.PR))
	}
	switch pr.State {
	case scm.PRMerged:
		out := m.Outputs
		out["commitId"] = pr.MergeSHA
		out["mergeCommitId"] = pr.MergeSHA
		return Done(out), nil
	case scm.PRClosed:
		return Fail(fmt.Sprintf("PR #%d (%s) was closed without being merged", pr.Number, pr.URL)), nil
	}
	if sc.WakeReason == "deadline" {
		return Fail(fmt.Sprintf("timed out waiting for PR #%d (%s) to be merged", pr.Number, pr.URL)), nil
	}
	return Park(Wait{Topics: []string{prTopic(p.Name(), string(r), pr.Number)}, Poll: time.Minute, Deadline: sc.Deadline,
		Reason: fmt.Sprintf("waiting for PR #%d to be merged: %s", pr.Number, pr.URL)}, m), nil
}

// plannedEdits turns the per-target inputs into one edit list per file: service → environment
// → override variables first (unless skipPipelineVariables), then the step's own (step wins).
func plannedEdits(sc *Context, cfg releaseConfig) ([]fileEdit, error) {
	targets := cfg.Targets
	if len(targets) == 0 {
		targets = []releaseTarget{cfg.releaseTarget}
	}
	byPath := map[string]*fileEdit{}
	var order []string
	for _, t := range targets {
		var paths []string
		if t.FilePath != "" {
			paths = append(paths, t.FilePath)
		}
		paths = append(paths, t.FilePaths...)
		if len(paths) == 0 {
			return nil, fmt.Errorf("filePath: required")
		}
		var changes []editChange
		if !cfg.SkipPipelineVariables && sc.Env != nil {
			keys := make([]string, 0, len(sc.Env.Variables))
			for k := range sc.Env.Variables {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				changes = append(changes, editChange{Change: fileedit.Change{Key: k, Value: sc.Env.Variables[k]}, doc: t.Document.Document})
			}
		}
		for i, v := range t.Variables {
			if v.Name == "" {
				return nil, fmt.Errorf("variables[%d].name: required", i)
			}
			val, err := variableValue(orDefault(string(v.Type), fileedit.TypeString), v.Value)
			if err != nil {
				return nil, fmt.Errorf("variables[%d] (%s): %w", i, v.Name, err)
			}
			vdoc := t.Document.Document
			if !v.Document.IsZero() {
				vdoc = v.Document.Document
			}
			changes = append(changes, editChange{Change: fileedit.Change{Key: v.Name, Value: val}, doc: vdoc, create: v.Create})
		}
		for _, raw := range paths {
			pth, err := safePath(raw)
			if err != nil {
				if t.Cluster != "" {
					return nil, fmt.Errorf("filePath (cluster %s): %w", t.Cluster, err)
				}
				return nil, fmt.Errorf("filePath: %w", err)
			}
			fe := byPath[pth]
			if fe == nil {
				fe = &fileEdit{path: pth}
				byPath[pth] = fe
				order = append(order, pth)
			}
			fe.changes = append(fe.changes, changes...)
		}
	}
	out := make([]fileEdit, 0, len(order))
	for _, p := range order {
		out = append(out, *dedupe(byPath[p]))
	}
	return out, nil
}

// dedupe keeps the last change per key and document (later layers win) in first-seen order.
func dedupe(fe *fileEdit) *fileEdit {
	id := func(c editChange) string { return c.doc.String() + "\x00" + c.Key }
	last := map[string]int{}
	for i, c := range fe.changes {
		last[id(c)] = i
	}
	var out []editChange
	seen := map[string]bool{}
	for _, c := range fe.changes {
		if seen[id(c)] {
			continue
		}
		seen[id(c)] = true
		out = append(out, fe.changes[last[id(c)]])
	}
	fe.changes = out
	return fe
}

func variableValue(typ string, v any) (any, error) {
	switch x := v.(type) {
	case string:
		return fileedit.ParseValue(typ, x)
	case nil:
		return nil, nil
	case map[string]any, []any:
		if strings.EqualFold(typ, "raw") || strings.EqualFold(typ, "object") {
			return x, nil
		}
		return nil, fmt.Errorf("a %s value cannot be a map or list (use type Raw)", typ)
	default:
		return fileedit.ParseValue(typ, fmt.Sprint(x))
	}
}

// setsSomething reports whether edits hold at least one value to set: files skipped under
// ignoreMissingFiles and values skipped under ignoreMissingValues set nothing, and nothing to
// set is never "already promoted".
func setsSomething(edits []fileEdit, skipped []string, ignoreMissing bool) bool {
	for _, e := range edits {
		if slices.Contains(skipped, e.path) {
			continue
		}
		for _, c := range e.changes {
			if !ignoreMissing || !fileedit.IsMissing(c.Value) {
				return true
			}
		}
	}
	return false
}

func pathsOf(edits []fileEdit) []string {
	out := make([]string, len(edits))
	for i, e := range edits {
		out[i] = e.path
	}
	return out
}

func envName(sc *Context) string {
	if sc.Env != nil && sc.Env.Name != "" {
		return sc.Env.Name
	}
	return sc.Stage
}
