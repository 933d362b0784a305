package gitengine

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/scmtest"
)

var bot = scm.Signature{Name: "prflow bot", Email: "bot@prflow.test"}

type fixture struct {
	srv    *scmtest.GitServer
	url    string
	tmp    string // the engine's scratch parent dir
	engine *Engine
	owner  string
	name   string
}

// newFixture serves a repo "acme/deploy" with files over smart HTTP and returns an engine that
// authenticates with the server's token and keeps its scratch dirs under a dir of its own.
func newFixture(t *testing.T, files map[string]string, opts ...Option) *fixture {
	t.Helper()
	srv := scmtest.NewGitServer(t)
	if _, err := srv.CreateRepo("acme", "deploy", files); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	all := append([]Option{WithBasicAuth("x-access-token", scmtest.DefaultToken), WithTempDir(tmp),
		WithRetry(10, 5*time.Millisecond, 50*time.Millisecond)}, opts...)
	return &fixture{srv: srv, url: srv.CloneURL("acme", "deploy"), tmp: tmp, engine: New(all...), owner: "acme", name: "deploy"}
}

func (f *fixture) read(t *testing.T, ref, path string) string {
	t.Helper()
	b, err := f.srv.ReadFile(f.owner, f.name, ref, path)
	if err != nil {
		t.Fatalf("read %s@%s: %v", path, ref, err)
	}
	return string(b)
}

func (f *fixture) head(t *testing.T, branch string) string {
	t.Helper()
	b, err := f.srv.Branches(f.owner, f.name)
	if err != nil {
		t.Fatal(err)
	}
	return b[branch]
}

// assertNoScratchLeft fails when the engine left anything in its temp dir.
// assertMainAtAndClean: main did not move from sha and no scratch directory is left.
func (f *fixture) assertMainAtAndClean(t *testing.T, sha string) {
	t.Helper()
	if f.head(t, "main") != sha {
		t.Fatal("main moved")
	}
	f.assertNoScratchLeft(t)
}

func (f *fixture) assertNoScratchLeft(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir(f.tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("scratch dirs left behind: %v", names)
	}
}

// fsck runs git fsck --strict on the served bare repo: trees we wrote must be well-formed.
func (f *fixture) fsck(t *testing.T) {
	t.Helper()
	gitCLI(t, f.srv.Dir(f.owner, f.name), "fsck", "--strict", "--no-progress")
}

func gitCLI(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return gitEnv(t, dir, nil, args...)
}

func gitEnv(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
