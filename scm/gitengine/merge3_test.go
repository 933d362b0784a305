package gitengine

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestMergeLines(t *testing.T) {
	base := "a\nb\nc\nd\ne\nf\ng\n"
	tests := []struct {
		name         string
		base, o, t   string
		want         string
		wantConflict bool
	}{
		{name: "only ours changed", base: base, o: "a\nB\nc\nd\ne\nf\ng\n", t: base, want: "a\nB\nc\nd\ne\nf\ng\n"},
		{name: "only theirs changed", base: base, o: base, t: "a\nb\nc\nd\ne\nf\nG\n", want: "a\nb\nc\nd\ne\nf\nG\n"},
		{name: "disjoint edits combine", base: base, o: "A\nb\nc\nd\ne\nf\ng\n", t: "a\nb\nc\nd\ne\nf\nG\n", want: "A\nb\nc\nd\ne\nf\nG\n"},
		{name: "same edit on both sides", base: base, o: "a\nb\nX\nd\ne\nf\ng\n", t: "a\nb\nX\nd\ne\nf\ng\n", want: "a\nb\nX\nd\ne\nf\ng\n"},
		{name: "overlapping edits conflict", base: base, o: "a\nb\nX\nd\ne\nf\ng\n", t: "a\nb\nY\nd\ne\nf\ng\n", wantConflict: true},
		{name: "adjacent edits conflict like git", base: base, o: "a\nb\nX\nd\ne\nf\ng\n", t: "a\nb\nc\nY\ne\nf\ng\n", wantConflict: true},
		{name: "insert and delete far apart", base: base, o: "a\nnew\nb\nc\nd\ne\nf\ng\n", t: "a\nb\nc\nd\ne\ng\n", want: "a\nnew\nb\nc\nd\ne\ng\n"},
		{name: "both append different lines", base: base, o: base + "x\n", t: base + "y\n", wantConflict: true},
		{name: "missing final newline kept", base: "a\nb\nc\nd", o: "A\nb\nc\nd", t: "a\nb\nc\nD", want: "A\nb\nc\nD"},
		{name: "binary changed on both sides", base: "a\x00b", o: "a\x00c", t: "a\x00d", wantConflict: true},
		{name: "binary changed on one side", base: "a\x00b", o: "a\x00c", t: "a\x00b", want: "a\x00c"},
		{name: "json keys on different lines", base: "{\n  \"dev\": \"1\",\n  \"mid\": 0,\n  \"prod\": \"1\"\n}\n",
			o: "{\n  \"dev\": \"2\",\n  \"mid\": 0,\n  \"prod\": \"1\"\n}\n", t: "{\n  \"dev\": \"1\",\n  \"mid\": 0,\n  \"prod\": \"3\"\n}\n",
			want: "{\n  \"dev\": \"2\",\n  \"mid\": 0,\n  \"prod\": \"3\"\n}\n"},
		{name: "empty base both add same", base: "", o: "x\n", t: "x\n", want: "x\n"},
		{name: "empty base both add differently", base: "", o: "x\n", t: "y\n", wantConflict: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := mergeLines([]byte(tc.base), []byte(tc.o), []byte(tc.t))
			if ok == tc.wantConflict {
				t.Fatalf("clean = %v, want conflict = %v (got %q)", ok, tc.wantConflict, got)
			}
			if ok && string(got) != tc.want {
				t.Fatalf("merged = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMergeLinesAgreesWithGit checks random edits against `git merge-file`: whenever both report
// a clean merge the results must be identical. Where the line alignment is ambiguous (one of two
// equal lines deleted next to a change) git's diff heuristics may pick another alignment than
// Myers' algorithm and so decide clean/conflict differently; that must stay rare.
func TestMergeLinesAgreesWithGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git binary required")
	}
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"}
	mutate := func(lines []string) []string {
		out := append([]string(nil), lines...)
		for n := r.IntN(3) + 1; n > 0; n-- {
			i := r.IntN(len(out) + 1)
			switch r.IntN(3) {
			case 0: // insert
				out = append(out[:i], append([]string{words[r.IntN(len(words))] + "!"}, out[i:]...)...)
			case 1: // delete
				if i < len(out) {
					out = append(out[:i], out[i+1:]...)
				}
			default: // change
				if i < len(out) {
					out[i] = words[r.IntN(len(words))] + "?"
				}
			}
		}
		return out
	}
	join := func(l []string) []byte {
		if len(l) == 0 {
			return nil
		}
		return []byte(strings.Join(l, "\n") + "\n")
	}
	agreeClean, disagree := 0, 0
	const cases = 300
	for i := 0; i < cases; i++ {
		var base []string
		for n := r.IntN(30) + 5; n > 0; n-- {
			base = append(base, words[r.IntN(len(words))])
		}
		o, th := mutate(base), mutate(base)
		got, ok := mergeLines(join(base), join(o), join(th))
		for name, data := range map[string][]byte{"o": join(o), "b": join(base), "t": join(th)} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command("git", "merge-file", "-p", "o", "b", "t")
		cmd.Dir = dir
		want, err := cmd.Output()
		var ee *exec.ExitError
		gitClean := err == nil
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		if ok != gitClean {
			disagree++
			t.Logf("case %d: clean=%v, git clean=%v\nbase %q\nours %q\ntheirs %q", i, ok, gitClean, base, o, th)
		}
		if ok && gitClean {
			agreeClean++
			if !bytes.Equal(got, want) {
				t.Fatalf("case %d: merged %q, git merged %q\nbase %q\nours %q\ntheirs %q", i, got, want, base, o, th)
			}
		}
	}
	if disagree*100 > cases*3 {
		t.Fatalf("clean/conflict decision differs from git in %d of %d cases", disagree, cases)
	}
	if agreeClean < 40 {
		t.Fatalf("only %d clean merges in the sample; the generator should produce more", agreeClean)
	}
}

func TestMyersMatchesIsAValidLCS(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 300; i++ {
		a := make([]int, r.IntN(40))
		b := make([]int, r.IntN(40))
		for j := range a {
			a[j] = r.IntN(5)
		}
		for j := range b {
			b[j] = r.IntN(5)
		}
		m, err := myersMatches(a, b)
		if err != nil {
			t.Fatal(err)
		}
		pi, pj := -1, -1
		for _, p := range m {
			if p[0] <= pi || p[1] <= pj || a[p[0]] != b[p[1]] {
				t.Fatalf("bad match %v in %v (a=%v b=%v)", p, m, a, b)
			}
			pi, pj = p[0], p[1]
		}
		if want := lcsLen(a, b); len(m) != want {
			t.Fatalf("matched %d, LCS is %d (a=%v b=%v)", len(m), want, a, b)
		}
	}
}

func lcsLen(a, b []int) int {
	dp := make([][]int, len(a)+1)
	for i := range dp {
		dp[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				dp[i][j] = dp[i+1][j+1] + 1
			} else {
				dp[i][j] = max(dp[i+1][j], dp[i][j+1])
			}
		}
	}
	return dp[0][0]
}
