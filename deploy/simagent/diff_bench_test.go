package simagent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/examples"
)

// BenchmarkDiff measures one preview of the example release repo's three apps (ApplicationSet
// regenerated at the PR's head, Jsonnet rendered at the head and at the deployed revision,
// diffed): what a DiffPreview step costs on the simulated agent, without NATS.
func BenchmarkDiff(b *testing.B) {
	dir := b.TempDir()
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull,
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(p, c string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	git("init", "-q", "-b", "main")
	files := examples.ReleaseRepo()
	for p, c := range files {
		write(p, c)
	}
	git("add", "-A")
	git("commit", "-q", "-m", "initial")
	base := git("rev-parse", "HEAD")
	git("checkout", "-q", "-b", "pr")
	write("envs/prod/config.json", strings.Replace(files["envs/prod/config.json"], `"tag": "1.4.1"`, `"tag": "1.5.0"`, 1))
	git("commit", "-q", "-am", "tag")
	head := git("rev-parse", "HEAD")
	git("checkout", "-q", "main")

	a, err := New(Options{Repo: dir, ManualSync: true, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	a.refresh(ctx)
	for _, app := range a.apps {
		app.deployed = base // as after the first sync
	}
	req := agent.DiffRequest{ApplicationSet: "web", Revision: head}
	for b.Loop() {
		got, err := a.Diff(ctx, req)
		if err != nil || len(got) != 3 {
			b.Fatalf("%d apps, %v", len(got), err)
		}
	}
}
