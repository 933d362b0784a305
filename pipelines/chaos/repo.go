package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// RepoState is what the release repo holds after the runs, read straight from the bare
// repository on disk (not through prflow), so the checks do not trust the code they check.
type RepoState struct {
	// Branches are the refs/heads/* other than the base branch.
	Branches []string
	// PRs are the local driver's PR records (refs/prflow/pulls/<n>, pr.json).
	PRs []PRRecord
	// OpenSlots are refs/prflow/open/* refs: one exists while a PR is open.
	OpenSlots []string
	// History is the base branch's first-parent chain after the seed commit, oldest first.
	History []Commit
	// Final is the watched files' flattened values at the base branch's head.
	Final map[FileKey]string
}

// PRRecord is the part of a local-driver PR record the checks read.
type PRRecord struct {
	Number   int         `json:"number"`
	State    string      `json:"state"`
	Head     string      `json:"head"`
	Base     string      `json:"base"`
	MergeSHA string      `json:"mergeSha"`
	Comments []PRComment `json:"comments"`
}

// PRComment is one comment kept in a PR record.
type PRComment struct {
	Body string `json:"body"`
}

// Commit is one commit of the base branch's first-parent history.
type Commit struct {
	SHA     string
	Parents []string
	Message string
	// Changed are the watched values this commit changed relative to its first parent.
	Changed map[FileKey]string
}

// FileKey names one value: a file and a dotted key in it.
type FileKey struct{ File, Key string }

func (k FileKey) String() string { return k.File + "#" + k.Key }

// ReadRepo reads the bare repository at dir: base branch history back to (not including)
// seed, watched values of every JSON file under watchDir, branches and PR records.
func ReadRepo(dir, base, seed, watchDir string) (*RepoState, error) {
	repo, err := git.PlainOpen(dir)
	if err != nil {
		return nil, fmt.Errorf("open release repo %s: %w", dir, err)
	}
	st := &RepoState{}
	refs, err := repo.References()
	if err != nil {
		return nil, fmt.Errorf("list refs of %s: %w", dir, err)
	}
	var pullRefs []*plumbing.Reference
	err = refs.ForEach(func(r *plumbing.Reference) error {
		name := r.Name().String()
		switch {
		case r.Name().IsBranch() && r.Name().Short() != base:
			st.Branches = append(st.Branches, r.Name().Short())
		case strings.HasPrefix(name, "refs/prflow/pulls/"):
			pullRefs = append(pullRefs, r)
		case strings.HasPrefix(name, "refs/prflow/open/"):
			st.OpenSlots = append(st.OpenSlots, name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(st.Branches)
	for _, r := range pullRefs {
		rec, err := readPR(repo, r)
		if err != nil {
			return nil, err
		}
		st.PRs = append(st.PRs, rec)
	}
	sort.Slice(st.PRs, func(i, j int) bool { return st.PRs[i].Number < st.PRs[j].Number })

	head, err := repo.Reference(plumbing.NewBranchReferenceName(base), true)
	if err != nil {
		return nil, fmt.Errorf("branch %s of %s: %w", base, dir, err)
	}
	var chain []*object.Commit
	for c, err := repo.CommitObject(head.Hash()); ; {
		if err != nil {
			return nil, fmt.Errorf("history of %s: %w", base, err)
		}
		if c.Hash.String() == seed {
			break
		}
		chain = append(chain, c)
		if len(c.ParentHashes) == 0 {
			return nil, fmt.Errorf("history of %s does not reach the seed commit %s", base, seed)
		}
		c, err = repo.CommitObject(c.ParentHashes[0])
	}
	seedCommit, err := repo.CommitObject(plumbing.NewHash(seed))
	if err != nil {
		return nil, fmt.Errorf("seed commit %s: %w", seed, err)
	}
	prev, err := watchedValues(seedCommit, watchDir)
	if err != nil {
		return nil, err
	}
	for i := len(chain) - 1; i >= 0; i-- {
		c := chain[i]
		vals, err := watchedValues(c, watchDir)
		if err != nil {
			return nil, err
		}
		cm := Commit{SHA: c.Hash.String(), Message: c.Message, Changed: map[FileKey]string{}}
		for _, p := range c.ParentHashes {
			cm.Parents = append(cm.Parents, p.String())
		}
		for k, v := range vals {
			if old, ok := prev[k]; !ok || old != v {
				cm.Changed[k] = v
			}
		}
		st.History = append(st.History, cm)
		prev = vals
	}
	st.Final = prev
	return st, nil
}

func readPR(repo *git.Repository, r *plumbing.Reference) (PRRecord, error) {
	c, err := repo.CommitObject(r.Hash())
	if err != nil {
		return PRRecord{}, fmt.Errorf("PR record %s: %w", r.Name(), err)
	}
	f, err := c.File("pr.json")
	if err != nil {
		return PRRecord{}, fmt.Errorf("PR record %s: pr.json: %w", r.Name(), err)
	}
	s, err := f.Contents()
	if err != nil {
		return PRRecord{}, fmt.Errorf("PR record %s: %w", r.Name(), err)
	}
	var rec PRRecord
	if err := json.Unmarshal([]byte(s), &rec); err != nil {
		return PRRecord{}, fmt.Errorf("PR record %s is not JSON: %w", r.Name(), err)
	}
	return rec, nil
}

// watchedValues flattens every JSON file under dir at commit c into FileKey → value (scalars
// as their JSON text, strings unquoted).
func watchedValues(c *object.Commit, dir string) (map[FileKey]string, error) {
	out := map[FileKey]string{}
	tree, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("tree of %s: %w", c.Hash, err)
	}
	sub, err := tree.Tree(dir)
	if errors.Is(err, object.ErrDirectoryNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s at %s: %w", dir, c.Hash, err)
	}
	err = sub.Files().ForEach(func(f *object.File) error {
		if !strings.HasSuffix(f.Name, ".json") {
			return nil
		}
		rd, err := f.Reader()
		if err != nil {
			return err
		}
		defer rd.Close()
		data, err := io.ReadAll(rd)
		if err != nil {
			return err
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			return fmt.Errorf("%s/%s at %s is not JSON: %w", dir, f.Name, c.Hash, err)
		}
		flatten(dir+"/"+f.Name, "", v, out)
		return nil
	})
	return out, err
}

func flatten(file, prefix string, v any, out map[FileKey]string) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			flatten(file, key, x, out)
		}
	case string:
		out[FileKey{file, prefix}] = t
	default:
		b, _ := json.Marshal(t)
		out[FileKey{file, prefix}] = string(b)
	}
}
