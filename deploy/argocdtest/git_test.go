package argocdtest

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestGitCLIAgainstSmartHTTPWithBasicAuth(t *testing.T) {
	g := newGitServer(t, "x-access-token", "tok-s3cret")
	repo := g.url("rel")
	sha1 := g.commit("rel", "main", map[string]string{
		"apps/demo/cm.yaml":     configMapHealthy,
		"apps/demo/sub/x.yaml":  configMap("x", "healthy"),
		"apps/other/cm.yaml":    configMap("o", "healthy"),
		"README.md":             "hello\n",
		"apps/demo/binary.json": "{\"a\":1}\n",
	})
	g.tag("rel", "v1.0.0")
	sha2 := g.commit("rel", "main", map[string]string{"apps/demo/cm.yaml": configMap("demo", "degraded")})
	shaFeature := g.commit("rel", "feature", map[string]string{"apps/demo/new.yaml": configMap("new", "healthy")})

	cli, err := NewGitCLI("", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ctx := t.Context()

	resolves := []struct{ rev, want string }{
		{"main", sha2}, {"", sha2}, {"HEAD", sha2}, {"refs/heads/main", sha2},
		{"feature", shaFeature}, {"v1.0.0", sha1}, {sha1, sha1}, {strings.ToUpper(sha1), sha1}, {sha1[:10], sha1},
	}
	for _, tc := range resolves {
		got, err := cli.Resolve(ctx, repo, tc.rev)
		if err != nil || got != tc.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tc.rev, got, err, tc.want)
		}
	}
	if _, err := cli.Resolve(ctx, repo, "nope"); !errors.Is(err, ErrRevisionNotFound) {
		t.Errorf("unknown revision: %v", err)
	}

	tree, err := cli.ReadTree(ctx, repo, sha1, "apps/demo")
	if err != nil {
		t.Fatal(err)
	}
	if len(tree) != 3 || string(tree["cm.yaml"]) != configMapHealthy || tree["sub/x.yaml"] == nil || string(tree["binary.json"]) != "{\"a\":1}\n" {
		t.Fatalf("tree at sha1: %v", keys(tree))
	}
	tree, err = cli.ReadTree(ctx, repo, sha2, "./apps/demo/")
	if err != nil || !strings.Contains(string(tree["cm.yaml"]), "degraded") {
		t.Fatalf("tree at sha2: %v %v", keys(tree), err)
	}
	root, err := cli.ReadTree(ctx, repo, sha1, "")
	if err != nil || len(root) != 5 || root["README.md"] == nil {
		t.Fatalf("root tree: %v %v", keys(root), err)
	}
	if _, err := cli.ReadTree(ctx, repo, sha1, "apps/missing"); !errors.Is(err, ErrPathNotFound) {
		t.Fatalf("missing dir: %v", err)
	}
	// A commit only reachable from a branch fetched later is found too.
	newer := g.commit("rel", "main", map[string]string{"apps/demo/later.yaml": configMap("later", "healthy")})
	if tree, err := cli.ReadTree(ctx, repo, newer, "apps/demo"); err != nil || tree["later.yaml"] == nil {
		t.Fatalf("tree at a new commit: %v %v", keys(tree), err)
	}
	if _, err := cli.ReadTree(ctx, repo, strings.Repeat("0", 40), "apps"); !errors.Is(err, ErrRevisionNotFound) {
		t.Fatalf("unknown commit: %v", err)
	}

	// Wrong credentials: a clear error that does not leak the secret.
	u, _ := url.Parse(repo)
	u.User = url.UserPassword("x-access-token", "wrong-secret-value")
	_, err = cli.Resolve(ctx, u.String(), "main")
	if err == nil || strings.Contains(err.Error(), "wrong-secret-value") || !strings.Contains(err.Error(), "xxxxx") {
		t.Fatalf("auth failure error %q must name the repo without the secret", err)
	}
	if _, err := cli.ReadTree(ctx, u.String(), sha1, "apps"); err == nil || strings.Contains(err.Error(), "wrong-secret-value") {
		t.Fatalf("ReadTree auth failure: %v", err)
	}
}

func TestServerSyncsFromAuthenticatedRepo(t *testing.T) {
	g := newGitServer(t, "bot", "pa55")
	repo := g.srv.URL + "/rel.git" // no credentials in the app spec
	sha := g.commit("rel", "main", map[string]string{"apps/demo/cm.yaml": configMapHealthy})

	// Without repository credentials the comparison fails with a clear error.
	anon := New(WithTimeline(3*time.Millisecond, 0))
	t.Cleanup(anon.Close)
	if err := anon.AddApp(demoApp("demo", repo, "apps/demo")); err != nil {
		t.Fatal(err)
	}
	if a, _ := anon.App("demo"); a.Status.Sync.Status != SyncStatusUnknown || len(a.Status.Conditions) != 1 ||
		!strings.Contains(a.Status.Conditions[0].Message, "Unable to resolve 'main' to a commit SHA") {
		t.Fatalf("unauthenticated repo: %s %+v", state(a), a.Status.Conditions)
	}

	s := New(WithTimeline(3*time.Millisecond, 0), WithRepoCredentials(g.srv.URL+"/", "bot", "pa55"))
	t.Cleanup(s.Close)
	if err := s.AddApp(demoApp("demo", repo, "apps/demo")); err != nil {
		t.Fatal(err)
	}
	st := openStream(t, s, "name=demo", "")
	st.next()
	call(t, s, "POST", "/api/v1/applications/demo/sync", SyncRequest{Revision: "main"})
	evs := st.until(synced(sha, HealthHealthy))
	// With zero Progressing steps the refresh after Succeeded goes straight
	// to Synced/Healthy, as with the realenv's ConfigMap.
	if n := len(evs); state(evs[n-2].Application) != "OutOfSync/Missing/Succeeded" {
		t.Fatalf("event before the final one: %s", state(evs[n-2].Application))
	}
}

func TestMemGit(t *testing.T) {
	mg := NewMemGit()
	repo := "https://git.example/m.git"
	a := mg.Commit(repo, "main", map[string]string{"a/x.yaml": "1", "a/y.yaml": "2", "b/z.yaml": "3"})
	b := mg.Commit(repo, "main", map[string]string{"a/x.yaml": "10"}, "a/y.yaml")
	mg.Tag(repo, "v1", a)
	ctx := t.Context()
	for rev, want := range map[string]string{"main": b, "": b, "HEAD": b, "v1": a, a: a, a[:8]: a} {
		if got, err := mg.Resolve(ctx, repo, rev); err != nil || got != want {
			t.Errorf("Resolve(%q) = %q %v, want %q", rev, got, err, want)
		}
	}
	tree, err := mg.ReadTree(ctx, repo, b, "a")
	if err != nil || len(tree) != 1 || string(tree["x.yaml"]) != "10" {
		t.Fatalf("tree %v %v", tree, err)
	}
	if _, err := mg.ReadTree(ctx, repo, b, "c"); !errors.Is(err, ErrPathNotFound) {
		t.Fatalf("missing dir: %v", err)
	}
	if _, err := mg.Resolve(ctx, repo, "nope"); !errors.Is(err, ErrRevisionNotFound) {
		t.Fatalf("unknown rev: %v", err)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
