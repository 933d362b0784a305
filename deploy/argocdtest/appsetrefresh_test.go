package argocdtest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func envAppSet(repo, revision string) ApplicationSet {
	return ApplicationSet{
		Metadata: ObjectMeta{Name: "web"},
		Spec: ApplicationSetSpec{
			Generators: []ApplicationSetGenerator{{Git: &GitGenerator{RepoURL: repo, Revision: revision,
				Files: []GitFileGeneratorItem{{Path: "envs/*/config.json"}}}}},
			Template: ApplicationSetTemplate{
				Metadata: ApplicationSetTemplateMeta{Name: "web-{{path.basename}}"},
				Spec: ApplicationSpec{Project: "default",
					Source:      &ApplicationSource{RepoURL: repo, TargetRevision: "main", Path: "apps/demo"},
					Destination: ApplicationDestination{Server: "https://kubernetes.default.svc", Namespace: "{{path.basename}}"}},
			},
		},
	}
}

func hasApp(s *Server, name string) bool { _, ok := s.App(name); return ok }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The ApplicationSet controller does not see a new environment until it polls (180s by
// default) or is asked to refresh: the refresh annotation posted back through
// POST /api/v1/applicationsets?upsert=true makes it regenerate at once and remove the
// annotation; a different spec without upsert is refused, an identical one is a no-op.
func TestAppSetRefreshAnnotationThroughAPI(t *testing.T) {
	s, mg, _ := newFake(t)
	repo := "https://git.example/demo.git"
	mg.Commit(repo, "main", map[string]string{"envs/dev/config.json": `{}`})
	if err := s.AddApplicationSet(envAppSet(repo, "main")); err != nil {
		t.Fatal(err)
	}
	if !hasApp(s, "web-dev") {
		t.Fatal("web-dev not generated")
	}
	mg.Commit(repo, "main", map[string]string{"envs/prod/config.json": `{}`})
	s.reconcileApps() // the application controller's pass does not regenerate sets
	time.Sleep(50 * time.Millisecond)
	if hasApp(s, "web-prod") {
		t.Fatal("web-prod appeared without a poll or refresh")
	}

	var as map[string]any
	call(t, s, "GET", "/api/v1/applicationsets/web", nil).json(t, &as)
	// The same object back: nothing changes, no regeneration.
	if r := call(t, s, "POST", "/api/v1/applicationsets", as); r.status != 200 {
		t.Fatalf("identical create: %d %s", r.status, r.body)
	}
	md := as["metadata"].(map[string]any)
	md["annotations"] = map[string]any{AppSetRefreshAnnotation: "true"}
	wantError(t, call(t, s, "POST", "/api/v1/applicationsets", as), 400, codeInvalidArgument,
		"existing ApplicationSet spec is different, use upsert flag to force update")
	if hasApp(s, "web-prod") || s.AppSetRefreshes() != 0 {
		t.Fatal("a refused create regenerated the set")
	}
	r := call(t, s, "POST", "/api/v1/applicationsets?upsert=true", as)
	if r.status != 200 {
		t.Fatalf("upsert: %d %s", r.status, r.body)
	}
	waitFor(t, "web-prod after the refresh", func() bool { return hasApp(s, "web-prod") })
	waitFor(t, "the annotation to be removed", func() bool {
		got, _ := s.ApplicationSet("web")
		_, ok := got.Metadata.Annotations[AppSetRefreshAnnotation]
		return !ok
	})
	if s.AppSetRefreshes() != 1 {
		t.Fatalf("refreshes = %d", s.AppSetRefreshes())
	}
	got, _ := s.ApplicationSet("web")
	if got.Metadata.Generation != 1 {
		t.Fatalf("an annotation-only upsert changed the generation to %d", got.Metadata.Generation)
	}

	// Mistaken input: a templated project and an unknown project are refused.
	bad := envAppSet(repo, "main")
	bad.Metadata.Name = "other"
	bad.Spec.Template.Spec.Project = "{{project}}"
	if r := call(t, s, "POST", "/api/v1/applicationsets", bad); r.status == 200 || !strings.Contains(string(r.body), "templated `project`") {
		t.Fatalf("templated project: %d %s", r.status, r.body)
	}
	bad.Spec.Template.Spec.Project = "nope"
	wantError(t, call(t, s, "POST", "/api/v1/applicationsets", bad), 400, codeInvalidArgument,
		"error checking create permissions for ApplicationSets other : ApplicationSet references project nope which does not exist")
}

func TestAppSetPollInterval(t *testing.T) {
	s, mg, _ := newFake(t, WithAppSetPollInterval(20*time.Millisecond))
	repo := "https://git.example/demo.git"
	mg.Commit(repo, "main", map[string]string{"envs/dev/config.json": `{}`})
	if err := s.AddApplicationSet(envAppSet(repo, "main")); err != nil {
		t.Fatal(err)
	}
	mg.Commit(repo, "main", map[string]string{"envs/qa/config.json": `{}`})
	waitFor(t, "web-qa at the next poll", func() bool { return hasApp(s, "web-qa") })
	if s.AppSetRefreshes() != 0 {
		t.Fatal("a poll counted as a refresh")
	}
}

func push(t *testing.T, url, secret string, payload any, sig string) (int, string) {
	t.Helper()
	b, _ := json.Marshal(payload)
	req, _ := http.NewRequest("POST", url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	if secret != "" {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(b)
		sig = "sha256=" + hex.EncodeToString(mac.Sum(nil))
	}
	if sig != "" {
		req.Header.Set("X-Hub-Signature-256", sig)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// The ApplicationSet controller's webhook: a signed GitHub push for the generator's repo and
// branch regenerates the set; a bad signature, another branch or another repo do not.
func TestAppSetWebhook(t *testing.T) {
	s, mg, _ := newFake(t, WithWebhookSecret("s3cret"))
	repo := "https://git.example/demo.git"
	mg.Commit(repo, "main", map[string]string{"envs/dev/config.json": `{}`})
	if err := s.AddApplicationSet(envAppSet(repo, "main")); err != nil {
		t.Fatal(err)
	}
	mg.Commit(repo, "main", map[string]string{"envs/prod/config.json": `{}`})
	hook := s.AppSetWebhookURL()
	ev := func(repoURL, ref, def string) map[string]any {
		return map[string]any{"ref": ref, "repository": map[string]any{"html_url": repoURL, "default_branch": def}}
	}
	if code, body := push(t, hook, "", ev("https://git.example/demo", "refs/heads/main", "main"), ""); code != 400 || !strings.Contains(body, "missing X-Hub-Signature-256") {
		t.Fatalf("unsigned: %d %s", code, body)
	}
	if code, body := push(t, hook, "", ev("https://git.example/demo", "refs/heads/main", "main"), "sha256=00"); code != 400 || !strings.Contains(body, "HMAC verification failed") {
		t.Fatalf("bad signature: %d %s", code, body)
	}
	for _, e := range []map[string]any{
		ev("https://git.example/demo", "refs/heads/feature", "main"),
		ev("https://git.example/other", "refs/heads/main", "main"),
	} {
		if code, body := push(t, hook, "s3cret", e, ""); code != 200 {
			t.Fatalf("push %v: %d %s", e, code, body)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if hasApp(s, "web-prod") || s.AppSetRefreshes() != 0 {
		t.Fatal("a push for another branch or repo regenerated the set")
	}
	if code, body := push(t, hook, "s3cret", ev("https://git.example/demo", "refs/heads/main", "main"), ""); code != 200 {
		t.Fatalf("push: %d %s", code, body)
	}
	waitFor(t, "web-prod after the push", func() bool { return hasApp(s, "web-prod") })
	if s.WebhookEvents() != 3 || s.AppSetRefreshes() != 1 {
		t.Fatalf("events %d refreshes %d", s.WebhookEvents(), s.AppSetRefreshes())
	}
}
