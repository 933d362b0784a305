package gitengine

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/scmtest"
)

// benchRepo describes a generated release repo: files apps/app-NNNNN/config.yaml, history of
// commits each touching a few files.
type benchRepo struct {
	name    string
	files   int
	commits int
}

var (
	smallRepo = benchRepo{name: "small", files: 10, commits: 20}
	largeRepo = benchRepo{name: "large", files: 20000, commits: 2000}
)

func appFile(i int) string { return fmt.Sprintf("apps/app-%05d/config.yaml", i) }

func appConfig(i, rev int) string {
	return fmt.Sprintf("# app %d\nimage:\n  repository: registry.example.com/app-%d\n  tag: v%d\nreplicas: 2\n", i, i, rev)
}

// generate writes the repo as a bare repository with git fast-import (seconds, even for the
// large one). The result is cached across benchmark runs under the system temp dir; a marker
// file written last says the cache is complete.
func (r benchRepo) generate(b *testing.B) (root string) {
	b.Helper()
	root = filepath.Join(os.TempDir(), fmt.Sprintf("prflow-gitengine-bench-%s-%d-%d", r.name, r.files, r.commits))
	dir := filepath.Join(root, "acme", "release.git")
	marker := filepath.Join(root, "complete")
	if _, err := os.Stat(marker); err == nil {
		return root
	}
	_ = os.RemoveAll(root)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	run := func(stdin func(*bufio.Writer), args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		done := make(chan struct{})
		if stdin != nil {
			pw, err := cmd.StdinPipe()
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				defer close(done)
				w := bufio.NewWriterSize(pw, 1<<20)
				stdin(w)
				_ = w.Flush()
				_ = pw.Close()
			}()
		} else {
			close(done)
		}
		out, err := cmd.CombinedOutput()
		<-done
		if err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run(nil, "init", "--bare", "-q", "-b", "main", ".")
	run(func(w *bufio.Writer) {
		data := func(s string) { fmt.Fprintf(w, "data %d\n%s\n", len(s), s) }
		when := 1_700_000_000
		for c := 0; c < r.commits; c++ {
			fmt.Fprintf(w, "commit refs/heads/main\ncommitter gen <gen@example.com> %d +0000\n", when+c*60)
			data(fmt.Sprintf("change %d", c))
			if c == 0 {
				for i := 0; i < r.files; i++ {
					fmt.Fprintf(w, "M 100644 inline %s\n", appFile(i))
					data(appConfig(i, 1))
				}
				continue
			}
			for k := 0; k < 5; k++ {
				i := (c*7919 + k*104729) % r.files
				fmt.Fprintf(w, "M 100644 inline %s\n", appFile(i))
				data(appConfig(i, c+1))
			}
		}
	}, "fast-import", "--quiet")
	run(nil, "gc", "--quiet")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	return root
}

// serve starts a smart-HTTP server over root and returns the repo URL.
func serve(b *testing.B, root string) string {
	b.Helper()
	g, err := scmtest.OpenGitServer(root)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(g)
	b.Cleanup(srv.Close)
	g.SetBaseURL(srv.URL)
	return g.CloneURL("acme", "release")
}

// peakRSS resets the kernel's high-water mark of this process (clear_refs 5) and returns a
// function that reads it (VmHWM) in MiB.
func peakRSS(b *testing.B) func() float64 {
	b.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Logf("cannot reset peak RSS (%v): the value includes earlier work", err)
	}
	return func() float64 {
		data, err := os.ReadFile("/proc/self/status")
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "VmHWM:") {
				kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
				return kb / 1024
			}
		}
		return 0
	}
}

// BenchmarkUpdateReleaseRepo changes one key in 3 files, commits and pushes, on a small repo
// (10 files) and a large one (20,000 files, 2,000 commits), with this engine and with the git
// CLI (shallow single-branch clone + commit + push, also with a sparse checkout). peak-RSS-MiB is this process's high-water
// mark for the engine and the largest git child process for the CLI.
func BenchmarkUpdateReleaseRepo(b *testing.B) {
	for _, repo := range []benchRepo{smallRepo, largeRepo} {
		b.Run(repo.name, func(b *testing.B) {
			if repo.files > 1000 && testing.Short() {
				b.Skip("large repo skipped with -short")
			}
			root := repo.generate(b)
			url := serve(b, root)
			b.Run("gitengine", func(b *testing.B) { benchEngine(b, url) })
			b.Run("gitcli", func(b *testing.B) { benchCLI(b, url, false) })
			b.Run("gitcli-sparse", func(b *testing.B) { benchCLI(b, url, true) })
		})
	}
}

// benchRev makes every benchmark iteration write new content (the framework re-runs the
// benchmark function with growing b.N).
var benchRev atomic.Int64

func bumpEdit(rev int) EditFunc {
	return func(_ context.Context, tree fs.FS) ([]scm.FileChange, error) {
		var out []scm.FileChange
		for i := 1; i <= 3; i++ {
			old, err := fs.ReadFile(tree, appFile(i))
			if err != nil {
				return nil, err
			}
			lines := strings.Split(string(old), "\n")
			for j, l := range lines {
				if strings.HasPrefix(l, "  tag: ") {
					lines[j] = fmt.Sprintf("  tag: bench-%d-%d", os.Getpid(), rev)
				}
			}
			out = append(out, scm.FileChange{Path: appFile(i), Content: []byte(strings.Join(lines, "\n"))})
		}
		return out, nil
	}
}

func benchEngine(b *testing.B, url string) {
	e := New(WithBasicAuth("x-access-token", scmtest.DefaultToken), WithTempDir(b.TempDir()))
	ctx := context.Background()
	peak := peakRSS(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := e.Commit(ctx, url, CommitRequest{Branch: "main", Message: "bump", Author: bot, Edit: bumpEdit(int(benchRev.Add(1)))})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Changed) != 3 {
			b.Fatalf("changed %v", res.Changed)
		}
	}
	b.StopTimer()
	b.ReportMetric(peak(), "peak-RSS-MiB")
}

// benchCLI: shallow single-branch clone, edit, commit, push. sparse checks out only the three
// directories it edits (git clone --sparse + sparse-checkout set), the fastest CLI flow.
func benchCLI(b *testing.B, url string, sparse bool) {
	authURL := strings.Replace(url, "http://", "http://x-access-token:"+scmtest.DefaultToken+"@", 1)
	var peakKB int64
	// A child started by Go inherits the Go process's RSS high-water mark until it execs, so
	// rusage would report at least this process's size. GNU time forks git from a small
	// process and reports git's own peak (%M, KiB); without it rusage is an upper bound.
	timeBin, _ := exec.LookPath("time")
	if _, err := os.Stat("/usr/bin/time"); err == nil {
		timeBin = "/usr/bin/time"
	}
	rssFile := filepath.Join(b.TempDir(), "rss")
	run := func(dir string, args ...string) {
		name := "git"
		if timeBin != "" {
			args = append([]string{"-f", "%M", "-o", rssFile, "git"}, args...)
			name = timeBin
		}
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_TERMINAL_PROMPT=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
		kb := int64(0)
		if timeBin != "" {
			data, _ := os.ReadFile(rssFile)
			kb, _ = strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		} else if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			kb = ru.Maxrss
		}
		peakKB = max(peakKB, kb)
	}
	tmp := b.TempDir()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dir := filepath.Join(tmp, strconv.Itoa(i))
		rev := benchRev.Add(1)
		if sparse {
			run(tmp, "clone", "-q", "--depth", "1", "--single-branch", "--branch", "main", "--sparse", authURL, dir)
			run(dir, "sparse-checkout", "set", path.Dir(appFile(1)), path.Dir(appFile(2)), path.Dir(appFile(3)))
		} else {
			run(tmp, "clone", "-q", "--depth", "1", "--single-branch", "--branch", "main", authURL, dir)
		}
		for f := 1; f <= 3; f++ {
			p := filepath.Join(dir, filepath.FromSlash(appFile(f)))
			old, err := os.ReadFile(p)
			if err != nil {
				b.Fatal(err)
			}
			lines := strings.Split(string(old), "\n")
			for j, l := range lines {
				if strings.HasPrefix(l, "  tag: ") {
					lines[j] = fmt.Sprintf("  tag: cli-%d-%d", os.Getpid(), rev)
				}
			}
			if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		run(dir, "-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q", "-am", "bump")
		run(dir, "push", "-q", "origin", "main")
		b.StopTimer()
		_ = os.RemoveAll(dir)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(peakKB)/1024, "peak-RSS-MiB")
}
