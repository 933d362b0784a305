package scmtest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// GenerateRepo creates owner/name in the server's root as a release repo with `files` config
// files (apps/app-NNNNN/config.yaml) and `commits` commits, each changing five files. It uses
// git fast-import, so even 20,000 files and 2,000 commits take seconds. For benchmarks of how
// cost grows with repo size.
func (g *GitServer) GenerateRepo(owner, name string, files, commits int) error {
	dir := g.Dir(owner, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("git", "init", "--bare", "-q", "-b", "main", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("git init: %v: %s", err, out)
	}
	cmd := exec.Command("git", "fast-import", "--quiet")
	cmd.Dir = dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	w := bufio.NewWriterSize(stdin, 1<<20)
	data := func(s string) { fmt.Fprintf(w, "data %d\n%s\n", len(s), s) }
	conf := func(i, rev int) string {
		return fmt.Sprintf("# app %d\nimage:\n  repository: registry.example.com/app-%d\n  tag: v%d\nreplicas: 2\n", i, i, rev)
	}
	for c := 0; c < commits; c++ {
		fmt.Fprintf(w, "commit refs/heads/main\ncommitter gen <gen@example.com> %d +0000\n", 1_700_000_000+c*60)
		data(fmt.Sprintf("change %d", c))
		if c == 0 {
			for i := 0; i < files; i++ {
				fmt.Fprintf(w, "M 100644 inline apps/app-%05d/config.yaml\n", i)
				data(conf(i, 1))
			}
			continue
		}
		for k := 0; k < 5; k++ {
			i := (c*7919 + k*104729) % files
			fmt.Fprintf(w, "M 100644 inline apps/app-%05d/config.yaml\n", i)
			data(conf(i, c+1))
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git fast-import into %s: %w", filepath.Base(dir), err)
	}
	return nil
}
