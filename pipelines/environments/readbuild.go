package environments

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/steps"
)

// This file puts the reads of release values (reads.go) into a build: the values an
// environment's files hold at its desired commit, the files a push without a file list
// changed (Bitbucket), and the reads the build still needs (built.wants).

// trackedKeys are the keys the environment's values are read at: those its promotions wrote,
// then its pipelines' static variables in each of its files.
func (a *envAcc) trackedKeys(files []string) []steps.ReadKey {
	var out []steps.ReadKey
	add := func(k steps.ReadKey) {
		if k.File != "" && k.Key != "" && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	for _, f := range a.facts {
		for _, ed := range f.edits {
			add(steps.ReadKey{File: ed.File, Key: ed.Key})
		}
	}
	for _, d := range a.decls {
		for _, f := range d.files {
			if slices.Contains(files, f) {
				for _, k := range d.keys {
					add(steps.ReadKey{File: f, Key: k})
				}
			}
		}
	}
	return out
}

func (a *envAcc) connector() string {
	for _, d := range a.decls {
		if d.connector != "" {
			return d.connector
		}
	}
	return ""
}

// readFor is the read that tells what the branch holds at commit for these files and keys:
// one at commit, or at a later pushed commit of the branch (pushes after the commit that
// touched the files would have made them the desired commit); a finished one first.
func (ix *index) readFor(bk, commit string, files []string, keys []steps.ReadKey) *readRecord {
	var best *readRecord
	rank := func(r *readRecord) int {
		n := 0
		if r.State == readDone {
			n += 2
		}
		if r.Commit == commit {
			n++
		}
		return n
	}
	for _, r := range ix.reads[bk] {
		if r.Commit != commit && !reaches(ix.parents, bk, r.Commit, commit) || !r.covers(files, keys) {
			continue
		}
		if best == nil || cmp.Or(cmp.Compare(rank(r), rank(best)), r.Requested.Compare(best.Requested)) > 0 {
			best = r
		}
	}
	return best
}

// readValues fills d.Read (and with a finished read, d.Values) from the read of the
// environment's files at d.Commit, and returns the read to ask for when there is none yet (or
// the last one failed on a forge error and is due again).
func (a *envAcc) readValues(in *inputs, ix *index, d *Desired, files []string, now time.Time) *readRequest {
	if d.Repo == "" || d.Branch == "" || len(files) == 0 {
		return nil
	}
	bk := branchKey(d.Repo, d.Branch)
	keys := a.trackedKeys(files)
	conn := a.connector()
	if t := ix.tracked[bk]; t == nil {
		ix.tracked[bk] = &readRequest{repo: d.Repo, branch: d.Branch, connector: conn, files: slices.Clone(files), keys: slices.Clone(keys)}
	} else {
		t.connector = cmpOr(t.connector, conn)
		for _, f := range files {
			if !slices.Contains(t.files, f) {
				t.files = append(t.files, f)
			}
		}
		for _, k := range keys {
			if !slices.Contains(t.keys, k) {
				t.keys = append(t.keys, k)
			}
		}
	}
	if d.Commit == "" {
		return nil // nothing desired yet; its pushes are compared all the same (compareWants)
	}
	rec := ix.readFor(bk, d.Commit, files, keys)
	var want *readRequest
	if due := dueAt(rec); rec == nil || !due.IsZero() && !now.Before(due) {
		if conn != "" {
			commit := d.Commit
			if h := ix.head[bk]; h != "" && h != commit && reaches(ix.parents, bk, h, commit) {
				commit = h // one read at the head serves every environment of the branch
			}
			want = &readRequest{repo: d.Repo, branch: d.Branch, connector: conn, commit: commit, files: files, keys: keys}
		}
	}
	if rec == nil {
		switch {
		case want != nil:
			d.Read = &ValuesRead{State: readReading, Commit: want.commit}
		case d.ValuesUnknown:
			d.Read = &ValuesRead{State: readFailed, Commit: d.Commit,
				Error: "not read: no pipeline of this environment names its release repo's connector without an expression"}
		}
		return want
	}
	vr := &ValuesRead{State: rec.State, Commit: rec.Commit, Attempts: rec.Attempt, Error: rec.Error}
	d.Read = vr
	switch rec.State {
	case readFailed:
		vr.At = rec.Ended
		if due := rec.due(); !due.IsZero() {
			vr.Retry = due
		}
		return want // the values stay the run's, or unknown after a hand commit: never a guess
	case readReading:
		return want
	}
	vr.At = rec.Ended
	byFile := map[string]steps.ReadFile{}
	if rec.Result != nil {
		for _, f := range rec.Result.Files {
			byFile[f.File] = f
		}
	}
	for _, f := range files {
		rf, ok := byFile[f]
		switch {
		case !ok:
		case !rf.Exists:
			vr.Missing = append(vr.Missing, f)
		case rf.Error != "":
			vr.Problems = append(vr.Problems, f+": "+rf.Error)
		}
	}
	var values []Value
	for _, k := range keys {
		rf, ok := byFile[k.File]
		if !ok || !rf.Exists || rf.Error != "" {
			continue
		}
		for _, rv := range rf.Values {
			if rv.Key != k.Key {
				continue
			}
			switch {
			case rv.Error != "":
				vr.Problems = append(vr.Problems, fmt.Sprintf("%s %s: %s", k.File, k.Key, rv.Error))
			case !rv.Found:
				vr.Problems = append(vr.Problems, fmt.Sprintf("%s has no %s", k.File, k.Key))
			default:
				values = append(values, Value{File: k.File, Key: k.Key, Value: rv.Value})
			}
		}
	}
	if !d.ValuesUnknown {
		// A merge prflow made: the run says what it wrote; the branch says what is there.
		for _, v := range d.Values {
			i := slices.IndexFunc(values, func(x Value) bool { return x.File == v.File && x.Key == v.Key })
			switch {
			case i < 0 && slices.Contains(vr.Missing, v.File):
				vr.Disagree = append(vr.Disagree, fmt.Sprintf("%s: the run wrote %v, the file is gone", v.Key, v.Value))
			case i >= 0 && !sameValue(v.Value, values[i].Value):
				vr.Disagree = append(vr.Disagree, fmt.Sprintf("%s in %s: the run wrote %v, the branch holds %v", v.Key, v.File, v.Value, values[i].Value))
			}
		}
	}
	d.Values, d.ValuesUnknown = values, false
	return want
}

func dueAt(r *readRecord) time.Time {
	if r == nil {
		return time.Time{}
	}
	return r.due()
}

// sameValue compares two values as JSON carries them (numbers as float64).
func sameValue(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	var x, y any
	_ = json.Unmarshal(ja, &x)
	_ = json.Unmarshal(jb, &y)
	return fmt.Sprint(x) == fmt.Sprint(y)
}

// mergeWants makes one read of the reads several environments of a branch want at one commit.
func mergeWants(ws []readRequest) []readRequest {
	var out []readRequest
	idx := map[string]int{}
	for _, w := range ws {
		k := branchKey(w.repo, w.branch) + "/" + w.commit + "/" + w.before
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			w.files, w.keys = slices.Clone(w.files), slices.Clone(w.keys)
			out = append(out, w)
			continue
		}
		for _, f := range w.files {
			if !slices.Contains(out[i].files, f) {
				out[i].files = append(out[i].files, f)
			}
		}
		for _, key := range w.keys {
			if !slices.Contains(out[i].keys, key) {
				out[i].keys = append(out[i].keys, key)
			}
		}
		out[i].connector = cmpOr(out[i].connector, w.connector)
	}
	return out
}

// finishWants sorts a want's files and keys (its id must not depend on map order) and finds
// the read it would repeat.
func finishWants(in *inputs, ws []readRequest, now time.Time) []readRequest {
	out := ws[:0]
	for _, w := range ws {
		slices.Sort(w.files)
		slices.SortFunc(w.keys, func(a, b steps.ReadKey) int { return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Key, b.Key)) })
		if r := in.reads[w.id()]; r != nil {
			due := r.due()
			if due.IsZero() || now.Before(due) {
				continue // asked for already: in flight, done, or failed for good
			}
			w.retry = r
		}
		out = append(out, w)
	}
	return out
}

// withComparedFiles is pushes with the files that a comparison read found for those the
// forge listed no (or not all) files of.
func withComparedFiles(pushes []pushEvent, reads map[string][]*readRecord) []pushEvent {
	var out []pushEvent
	for i, p := range pushes {
		if !p.incomplete {
			continue
		}
		for _, r := range reads[branchKey(p.repo, p.branch)] {
			if r.State != readDone || r.Result == nil || r.Before == "" || r.Commit != p.after {
				continue
			}
			if out == nil {
				out = slices.Clone(pushes)
			}
			files := slices.Clone(out[i].files)
			for _, f := range r.Result.Changed {
				if !slices.Contains(files, f) {
					files = append(files, f)
				}
			}
			out[i].files = files
		}
	}
	if out == nil {
		return pushes
	}
	return out
}

// inRange reports whether commit is one of the pushed commits after before up to head.
func inRange(parents map[string]string, bk, before, head, commit string) bool {
	cur := head
	for range 10000 {
		if cur == commit {
			return true
		}
		if cur == before {
			return false
		}
		p, ok := parents[bk+"/"+cur]
		if !ok {
			return false
		}
		cur = p
	}
	return false
}

// compareWants asks, per release branch, for the files changed by the pushes whose webhook
// listed none (or not all): one comparison from before the oldest such push not yet compared
// to after the newest, which reads the branch's tracked values at that commit too.
func compareWants(in *inputs, ix *index, ours map[string]bool, now time.Time) []readRequest {
	var out []readRequest
	open := map[string][]int{} // branch → its uncompared incomplete pushes, in arrival order
	for i, p := range in.pushes {
		bk := branchKey(p.repo, p.branch)
		t := ix.tracked[bk]
		if !p.incomplete || t == nil || t.connector == "" || ours[p.after] || p.before == "" || p.before == scm.ZeroSHA || p.after == "" {
			continue
		}
		covered := false
		for _, r := range ix.reads[bk] {
			if r.Before != "" && (r.Commit == p.after || inRange(ix.parents, bk, r.Before, r.Commit, p.after)) {
				covered = true
				break
			}
		}
		if !covered {
			open[bk] = append(open[bk], i)
		}
	}
	for bk, list := range open {
		newest := in.pushes[list[len(list)-1]]
		before := newest.before
		for j := len(list) - 2; j >= 0; j-- {
			if p := in.pushes[list[j]]; p.after == before {
				before = p.before
			}
		}
		t := ix.tracked[bk]
		out = append(out, readRequest{repo: t.repo, branch: t.branch, connector: t.connector, commit: newest.after, before: before,
			files: slices.Clone(t.files), keys: slices.Clone(t.keys)})
	}
	return out
}
