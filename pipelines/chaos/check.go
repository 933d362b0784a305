package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/prflow/prflow/pipelines"
)

// Group is how a run contends with the others.
type Group string

const (
	// DistinctFiles: each run of the group edits its own file.
	DistinctFiles Group = "distinct-files"
	// DistinctKeys: the runs of the group edit one file, each its own key.
	DistinctKeys Group = "one-file"
	// OneKey: the runs of the group all set the same key of the same file.
	OneKey Group = "one-key"
)

// RunSpec is one promotion the suite starts: the value it sets where.
type RunSpec struct {
	ID    string
	Group Group
	File  string // path in the release repo
	Key   string // dotted key
	Value string // unique to the run
}

// RunResult is a run's final state as the server reports it.
type RunResult struct {
	Status string
	Error  string
	// Where says which step failed or was left unfinished, and how.
	Where string
}

// Exec is one execution of a job on one worker process, from the worker's log.
type Exec struct {
	Job    string
	Worker string
	Start  time.Time
	End    time.Time
	Killed bool // the worker was SIGKILLed before the step returned; End is the kill time
}

// Observed is everything the checks look at.
type Observed struct {
	Runs  map[string]RunResult // by run id; a run missing here never reached the server
	Repo  *RepoState
	Execs []Exec
	// Crashes are the processes whose output shows a panic, a fatal error or a data race
	// (process name → the first such line).
	Crashes map[string]string
	// BranchPrefix is the head-branch prefix of the runs' PRs: PRs and branches are
	// attributed to a run by the "/<run id>/" segment after it.
	BranchPrefix string
	// HandBacks are the jobs workers were delivered with no free slot and handed back
	// unrun ("<worker> at <time>"); nil when the logs were not read.
	HandBacks []string
}

// Check is one counted check: Bad is how many misses; the check passes when Bad is 0.
type Check struct {
	Name    string
	Counted int // what was looked at (runs, PRs, jobs...)
	Bad     int
	Details []string
}

// OK reports whether the check found no miss.
func (c Check) OK() bool { return c.Bad == 0 }

func (c *Check) miss(format string, a ...any) {
	c.Bad++
	c.Details = append(c.Details, fmt.Sprintf(format, a...))
}

// repoCheck starts check name over the release repo; ok is false when the repo was not read,
// and the check has then failed.
func repoCheck(name string, obs Observed) (c Check, ok bool) {
	c = Check{Name: name}
	if obs.Repo == nil {
		c.miss("release repo not read")
		return c, false
	}
	return c, true
}

// Evaluate runs every check over what was observed. Each check counts its misses; none stops
// the others, so one report shows every kind of damage.
func Evaluate(specs []RunSpec, obs Observed) []Check {
	byRun := attribute(specs, obs)
	return []Check{
		checkTerminal(specs, obs),
		checkSucceeded(specs, obs),
		checkOnePR(specs, byRun),
		checkOneMerge(specs, byRun),
		checkLostUpdates(specs, obs, byRun),
		checkAppliedTwice(specs, obs),
		checkLeftoverBranches(obs),
		checkOpenPRs(obs),
		checkStrayCommits(obs, byRun),
		checkDoubleComments(obs),
		checkCrashes(obs),
		checkHandBacks(obs),
		checkOverlaps("jobs run twice at the same time", obs.Execs, func(job string) string { return job }),
		checkOverlaps("steps run twice at the same time", obs.Execs, stepOf),
	}
}

// runArtifacts is what the repo holds for one run.
type runArtifacts struct {
	prs    []PRRecord
	merges []int // indexes into History
}

// attribute maps PRs, branches and base-branch merges to runs by the run id in the head
// branch name (prflow/<pipeline>/<run>/<stage>-<step>), independent of what the run reports.
func attribute(specs []RunSpec, obs Observed) map[string]*runArtifacts {
	out := map[string]*runArtifacts{}
	for _, s := range specs {
		out[s.ID] = &runArtifacts{}
	}
	if obs.Repo == nil {
		return out
	}
	for _, pr := range obs.Repo.PRs {
		if id := runOf(obs.BranchPrefix, pr.Head); out[id] != nil {
			out[id].prs = append(out[id].prs, pr)
		}
	}
	for i, c := range obs.Repo.History {
		if id := mergedRun(obs, c); out[id] != nil {
			out[id].merges = append(out[id].merges, i)
		}
	}
	return out
}

// runOf returns the run id in a head branch name, "" if it is not a run's branch.
func runOf(prefix, branch string) string {
	rest, ok := strings.CutPrefix(branch, prefix)
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// mergedRun returns the run whose PR a base-branch commit merged: the commit is a PR
// record's merge SHA, or its message names the run's branch ("Merge pull request #N from
// <branch>"); "" when neither.
func mergedRun(obs Observed, c Commit) string {
	for _, pr := range obs.Repo.PRs {
		if pr.MergeSHA == c.SHA {
			return runOf(obs.BranchPrefix, pr.Head)
		}
	}
	if _, after, ok := strings.Cut(c.Message, " from "+obs.BranchPrefix); ok {
		id, _, _ := strings.Cut(after, "/")
		return id
	}
	return ""
}

func checkTerminal(specs []RunSpec, obs Observed) Check {
	c := Check{Name: "runs terminal", Counted: len(specs)}
	for _, s := range specs {
		r, ok := obs.Runs[s.ID]
		switch {
		case !ok:
			c.miss("run %s: never started on the server", s.ID)
		case !terminal(r.Status):
			c.miss("run %s: still %s %s", s.ID, r.Status, r.Where)
		}
	}
	return c
}

func checkSucceeded(specs []RunSpec, obs Observed) Check {
	c := Check{Name: "runs succeeded", Counted: len(specs)}
	for _, s := range specs {
		r := obs.Runs[s.ID]
		if r.Status != "succeeded" {
			c.miss("run %s (%s): %s at %s: %s", s.ID, s.Group, orNone(r.Status), orNone(r.Where), r.Error)
		}
	}
	return c
}

func checkOnePR(specs []RunSpec, byRun map[string]*runArtifacts) Check {
	c := Check{Name: "exactly one PR per run", Counted: len(specs)}
	for _, s := range specs {
		if prs := byRun[s.ID].prs; len(prs) != 1 {
			c.miss("run %s: %d PRs %s", s.ID, len(prs), describePRs(prs))
		}
	}
	return c
}

func checkOneMerge(specs []RunSpec, byRun map[string]*runArtifacts) Check {
	c := Check{Name: "exactly one merge per run", Counted: len(specs)}
	for _, s := range specs {
		if m := byRun[s.ID].merges; len(m) != 1 {
			c.miss("run %s: merged %d times into the base branch", s.ID, len(m))
		}
	}
	return c
}

// checkLostUpdates: every merged run's distinct file or distinct key holds its value at the
// end; the one key holds the value set by the last of its group's merges. A run that never
// merged lost nothing here: "exactly one merge per run" and "runs succeeded" count it.
func checkLostUpdates(specs []RunSpec, obs Observed, byRun map[string]*runArtifacts) Check {
	c, ok := repoCheck("lost updates", obs)
	if !ok {
		return c
	}
	oneKey := map[FileKey][]RunSpec{}
	for _, s := range specs {
		if len(byRun[s.ID].merges) == 0 {
			continue
		}
		c.Counted++
		k := FileKey{s.File, s.Key}
		if s.Group == OneKey {
			oneKey[k] = append(oneKey[k], s)
			continue
		}
		if got, ok := obs.Repo.Final[k]; !ok || got != s.Value {
			c.miss("run %s (%s): %s is %q at the end, want %q", s.ID, s.Group, k, got, s.Value)
		}
	}
	keys := make([]FileKey, 0, len(oneKey))
	for k := range oneKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		group := oneKey[k]
		got := obs.Repo.Final[k]
		last, lastAt := RunSpec{}, -1
		owner := ""
		for _, s := range group {
			if s.Value == got {
				owner = s.ID
			}
			for _, i := range byRun[s.ID].merges {
				if i > lastAt {
					last, lastAt = s, i
				}
			}
		}
		switch {
		case owner == "":
			c.miss("%s is %q at the end: no merged run of the group set it", k, got)
		case lastAt >= 0 && last.Value != got:
			c.miss("%s is %q (run %s) at the end, but the last merge of the group was run %s's (%q): its update was lost",
				k, got, owner, last.ID, last.Value)
		}
	}
	return c
}

// checkAppliedTwice: no run's value was written into the base branch by more than one commit.
// A succeeded run whose value never reached the base branch is reported here too.
func checkAppliedTwice(specs []RunSpec, obs Observed) Check {
	c, ok := repoCheck("values applied twice", obs)
	c.Counted = len(specs)
	if !ok {
		return c
	}
	for _, s := range specs {
		k := FileKey{s.File, s.Key}
		var at []string
		for _, cm := range obs.Repo.History {
			if v, ok := cm.Changed[k]; ok && v == s.Value {
				at = append(at, short(cm.SHA))
			}
		}
		switch {
		case len(at) > 1:
			c.miss("run %s: %s=%q applied by %d commits %v", s.ID, k, s.Value, len(at), at)
		case len(at) == 0 && obs.Runs[s.ID].Status == "succeeded":
			c.miss("run %s succeeded but %s=%q never reached the base branch", s.ID, k, s.Value)
		}
	}
	return c
}

func checkLeftoverBranches(obs Observed) Check {
	c, ok := repoCheck("leftover branches", obs)
	if !ok {
		return c
	}
	c.Counted = len(obs.Repo.Branches)
	for _, b := range obs.Repo.Branches {
		c.miss("branch %s still exists", b)
	}
	return c
}

func checkOpenPRs(obs Observed) Check {
	c, ok := repoCheck("open PRs", obs)
	if !ok {
		return c
	}
	c.Counted = len(obs.Repo.PRs)
	open := 0
	for _, pr := range obs.Repo.PRs {
		if pr.State == "open" {
			open++
			c.miss("PR #%d %s → %s is open", pr.Number, pr.Head, pr.Base)
		}
	}
	if n := len(obs.Repo.OpenSlots); n != open {
		c.miss("%d open-PR slots (refs/prflow/open/*) for %d open PR records", n, open)
	}
	return c
}

// checkDoubleComments: prflow comments a summary once on each PR it opens; two of its
// comments on one PR are a side effect done twice.
func checkDoubleComments(obs Observed) Check {
	c, ok := repoCheck("PR comments posted twice", obs)
	if !ok {
		return c
	}
	c.Counted = len(obs.Repo.PRs)
	for _, pr := range obs.Repo.PRs {
		n := 0
		for _, cm := range pr.Comments {
			if strings.HasPrefix(cm.Body, prflowComment) {
				n++
			}
		}
		if n > 1 {
			c.miss("PR #%d (%s) has %d prflow comments", pr.Number, pr.Head, n)
		}
	}
	return c
}

// prflowComment starts the summary prflow comments on the PRs it opens.
const prflowComment = "**prflow**"

// checkStrayCommits: every base-branch commit after the seed is the merge of a run's PR.
func checkStrayCommits(obs Observed, byRun map[string]*runArtifacts) Check {
	c, ok := repoCheck("commits not from a run's merge", obs)
	if !ok {
		return c
	}
	c.Counted = len(obs.Repo.History)
	for _, cm := range obs.Repo.History {
		if byRun[mergedRun(obs, cm)] == nil {
			c.miss("commit %s %q", short(cm.SHA), firstLine(cm.Message))
		}
	}
	return c
}

// checkOverlaps: no two executions with the same key (the job id, or its step: any attempt
// or wake of it) have overlapping time spans. Timestamps come from one clock (all processes
// on this machine), so two executions one after the other never compare as overlapping.
func checkOverlaps(name string, execs []Exec, key func(job string) string) Check {
	byJob := map[string][]Exec{}
	for _, e := range execs {
		k := key(e.Job)
		byJob[k] = append(byJob[k], e)
	}
	c := Check{Name: name, Counted: len(byJob)}
	jobs := make([]string, 0, len(byJob))
	for j := range byJob {
		jobs = append(jobs, j)
	}
	sort.Strings(jobs)
	for _, j := range jobs {
		es := byJob[j]
		sort.Slice(es, func(a, b int) bool { return es[a].Start.Before(es[b].Start) })
		for a := 0; a < len(es); a++ {
			for b := a + 1; b < len(es); b++ {
				if es[b].Start.Before(es[a].End) {
					c.miss("%s: on %s %s and on %s %s", describeJobs(es[a].Job, es[b].Job), es[a].Worker, span(es[a]), es[b].Worker, span(es[b]))
				}
			}
		}
	}
	return c
}

func checkCrashes(obs Observed) Check {
	c := Check{Name: "processes crashed (panic, race)", Counted: len(obs.Crashes)}
	names := make([]string, 0, len(obs.Crashes))
	for n := range obs.Crashes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c.miss("%s: %s", n, obs.Crashes[n])
	}
	return c
}

// checkHandBacks counts deliveries spent without a run: a worker that asks only for free
// slots is never delivered a job it cannot start.
func checkHandBacks(obs Observed) Check {
	c := Check{Name: "jobs handed back unrun (no slot)", Counted: len(obs.Execs)}
	for _, h := range obs.HandBacks {
		c.miss("%s", h)
	}
	return c
}

// stepOf drops the attempt and wake from a job id (run/stage/[rb.]step/attempt/wake).
func stepOf(job string) string {
	parts := strings.Split(job, "/")
	if len(parts) < 3 {
		return job
	}
	return strings.Join(parts[:len(parts)-2], "/")
}

func describeJobs(a, b string) string {
	if a == b {
		return "job " + a
	}
	return "jobs " + a + " and " + b
}

func span(e Exec) string {
	end := e.End.Format("15:04:05.000")
	if e.Killed {
		end += " (killed)"
	}
	return e.Start.Format("15:04:05.000") + "–" + end
}

func terminal(status string) bool { return pipelines.Status(status).Terminal() }

func describePRs(prs []PRRecord) string {
	var parts []string
	for _, p := range prs {
		parts = append(parts, fmt.Sprintf("#%d %s", p.Number, p.State))
	}
	if len(parts) == 0 {
		return ""
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func short(sha string) string {
	if len(sha) > 10 {
		return sha[:10]
	}
	return sha
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
