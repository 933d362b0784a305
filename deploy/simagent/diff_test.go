package simagent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/examples"
)

// startExample runs the simulated agent on a copy of examples/release-repo (the repo `prflow
// dev` promotes through) and waits until every app is deployed at the initial commit.
func startExample(t *testing.T) *simWorld {
	t.Helper()
	r := &repo{t: t, dir: t.TempDir()}
	r.git("init", "-q", "-b", "main")
	for p, c := range examples.ReleaseRepo() {
		r.write(p, c)
	}
	r.git("add", "-A")
	r.git("commit", "-q", "-m", "initial")
	w := startSim(t, false, func(o *Options) { o.Repo = r.dir })
	w.repo = r
	head := r.git("rev-parse", "HEAD")
	for _, app := range []string{"web-dev", "web-staging", "web-prod"} {
		w.waitRecord(app, "deployed", func(s *agent.AppStatus) bool {
			return s != nil && s.SyncedRevision == head && s.Sync == agent.SyncSynced && s.Health == agent.HealthHealthy
		})
	}
	return w
}

// branch commits files on a new branch off main (as UpdateReleaseRepo does) and returns its
// head; main does not move.
func (r *repo) branch(name string, files map[string]string) string {
	r.t.Helper()
	r.git("checkout", "-q", "-b", name, "main")
	for p, c := range files {
		r.write(p, c)
	}
	r.git("add", "-A")
	r.git("commit", "-q", "-m", "change on "+name)
	sha := r.git("rev-parse", "HEAD")
	r.git("checkout", "-q", "main")
	return sha
}

func prodConfig(extra string) string {
	return `{
  "env": "prod",
  "cluster": {"name": "prod-eu"},
  "image": {"repository": "registry.example.com/shop/web", "tag": "1.4.1"` + extra + `},
  "replicas": 2
}
`
}

func byApp(t *testing.T, ds []agent.AppDiff) map[string]agent.AppDiff {
	t.Helper()
	out := map[string]agent.AppDiff{}
	for _, d := range ds {
		out[d.App] = d
	}
	return out
}

func TestDiffRendersTheRevision(t *testing.T) {
	w := startExample(t)
	ctx := context.Background()
	jsonnetSrc := examples.ReleaseRepo()["manifests/web/web.jsonnet"]
	cases := []struct {
		name  string
		files map[string]string
		req   agent.DiffRequest
		check func(t *testing.T, got map[string]agent.AppDiff)
	}{{
		name:  "config change reaches the rendered ConfigMap",
		files: map[string]string{"envs/prod/config.json": strings.Replace(prodConfig(""), `"1.4.1"`, `"1.5.0"`, 1)},
		req:   agent.DiffRequest{Apps: []string{"web-dev", "web-prod"}},
		check: func(t *testing.T, got map[string]agent.AppDiff) {
			p := got["web-prod"]
			if !p.Changed() || len(p.Resources) != 1 || p.Error != "" {
				t.Fatalf("web-prod: %+v", p)
			}
			r := p.Resources[0]
			if r.Kind != "ConfigMap" || r.Name != "web" || r.Namespace != "web-prod" || r.Change != agent.ChangeChanged ||
				strings.Join(r.Paths, ",") != "data.image" {
				t.Fatalf("resource: %+v", r)
			}
			if len(r.Values) != 1 || r.Values["data.image"] != "registry.example.com/shop/web:1.5.0" {
				t.Fatalf("values: %v", r.Values)
			}
			if !strings.Contains(r.Diff, "-  image: registry.example.com/shop/web:1.4.1") || !strings.Contains(r.Diff, "+  image: registry.example.com/shop/web:1.5.0") {
				t.Fatalf("diff:\n%s", r.Diff)
			}
			if len(p.SpecChanges) != 1 || !strings.Contains(p.SpecChanges[0], "tlas[image]") || !strings.Contains(p.SpecChanges[0], "1.5.0") {
				t.Fatalf("spec changes: %q", p.SpecChanges)
			}
			if d := got["web-dev"]; d.Changed() || d.Unchanged != 1 || d.Error != "" {
				t.Fatalf("web-dev changed: %+v", d)
			}
		},
	}, {
		name:  "a mistyped key changes nothing deployed",
		files: map[string]string{"envs/prod/config.json": prodConfig(`, "tga": "1.5.0"`)},
		req:   agent.DiffRequest{Apps: []string{"web-prod"}},
		check: func(t *testing.T, got map[string]agent.AppDiff) {
			if p := got["web-prod"]; p.Changed() || p.Error != "" || p.Unchanged != 1 {
				t.Fatalf("web-prod: %+v", p)
			}
		},
	}, {
		name: "a jsonnet change shows in every app",
		files: map[string]string{"manifests/web/web.jsonnet": strings.Replace(jsonnetSrc,
			"'app.kubernetes.io/instance': 'web-' + env }", "'app.kubernetes.io/instance': 'web-' + env, team: 'shop' }", 1)},
		req: agent.DiffRequest{ApplicationSet: "web"},
		check: func(t *testing.T, got map[string]agent.AppDiff) {
			if len(got) != 3 {
				t.Fatalf("%d apps: %+v", len(got), got)
			}
			for n, d := range got {
				if len(d.SpecChanges) != 0 || len(d.Resources) != 1 || strings.Join(d.Resources[0].Paths, ",") != "metadata.labels.team" {
					t.Fatalf("%s: %+v", n, d)
				}
			}
		},
	}, {
		name: "a new environment creates an app",
		files: map[string]string{"envs/qa/config.json": `{"env": "qa", "cluster": {"name": "qa-eu"},
  "image": {"repository": "registry.example.com/shop/web", "tag": "1.5.0"}, "replicas": 1}`},
		req: agent.DiffRequest{Apps: []string{"web-prod"}, ApplicationSet: "web"},
		check: func(t *testing.T, got map[string]agent.AppDiff) {
			q := got["web-qa"]
			if !q.Created || len(q.Resources) != 1 || q.Resources[0].Change != agent.ChangeAdded || q.Resources[0].Namespace != "web-qa" {
				t.Fatalf("web-qa: %+v", q)
			}
			if v := q.Resources[0].Values; v["data.replicas"] != "1" || v["kind"] != "ConfigMap" {
				t.Fatalf("values of the new object: %v", v)
			}
			if !strings.Contains(q.Resources[0].Diff, "+  image: registry.example.com/shop/web:1.5.0") {
				t.Fatalf("diff:\n%s", q.Resources[0].Diff)
			}
			p, d := got["web-prod"], got["web-dev"]
			if p.Changed() || d.Changed() {
				t.Fatalf("other apps changed: %+v", got)
			}
		},
	}, {
		name:  "an unknown app is an error of that app",
		files: map[string]string{"README.md": "x\n"},
		req:   agent.DiffRequest{Apps: []string{"web-prod", "web-typo"}},
		check: func(t *testing.T, got map[string]agent.AppDiff) {
			if e := got["web-typo"].Error; !strings.Contains(e, "not found") {
				t.Fatalf("web-typo: %+v", got["web-typo"])
			}
			if d := got["web-prod"]; d.Changed() || d.Error != "" {
				t.Fatalf("web-prod: %+v", d)
			}
		},
	}, {
		name:  "a jsonnet error is the app's comparison error, not no change",
		files: map[string]string{"manifests/web/web.jsonnet": jsonnetSrc + "\n+ nope"},
		req:   agent.DiffRequest{Apps: []string{"web-prod"}},
		check: func(t *testing.T, got map[string]agent.AppDiff) {
			if d := got["web-prod"]; !strings.Contains(d.Error, "ComparisonError") || !strings.Contains(d.Error, "web.jsonnet") {
				t.Fatalf("web-prod: %+v", d)
			}
		},
	}}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.req
			req.Revision = w.repo.branch("case"+string(rune('a'+i)), c.files)
			// Through NATS, as a step asks.
			got, err := w.client.Diff(ctx, "sim", req)
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, byApp(t, got))
		})
	}
}

func TestDiffMasksSecretsAndCapsTheDiff(t *testing.T) {
	w := startExample(t)
	ctx := context.Background()
	withSecret := func(pw string) string {
		return `function(env, image, replicas, simulate='healthy') [
  { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'web-db' }, data: { password: std.base64('` + pw + `'), user: std.base64('web') } },
  { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'big' }, data: { ['k%03d' % i]: 'value %d of a large config' % i for i in std.range(1, 120) } },
]
`
	}
	base := w.repo.merge("secret", map[string]string{"manifests/web/web.jsonnet": withSecret("hunter2-old")})
	// The simulated agent's sync status follows the config files: deploy the merge by request.
	if _, err := w.client.Sync(ctx, "sim", agent.SyncRequest{Apps: []string{"web-prod"}, Revision: base, Refresh: agent.RefreshNormal}); err != nil {
		t.Fatal(err)
	}
	w.waitRecord("web-prod", "the secret deployed", func(s *agent.AppStatus) bool {
		return s.SyncedRevision == base && s.Sync == agent.SyncSynced
	})
	rev := w.repo.branch("rotate", map[string]string{"manifests/web/web.jsonnet": strings.Replace(
		strings.Replace(withSecret("hunter2-new"), "large config", "larger config", 1), "web-db' }", "web-db', labels: {rotated: 'yes'} }", 1)})
	got, err := w.client.Diff(ctx, "sim", agent.DiffRequest{Apps: []string{"web-prod"}, Revision: rev, MaxDiffBytes: 2000})
	if err != nil {
		t.Fatal(err)
	}
	d := got[0]
	if len(d.Resources) != 2 || !d.Truncated {
		t.Fatalf("want 2 resources and a truncated diff: %+v", d)
	}
	total := 0
	for _, r := range d.Resources {
		total += len(r.Diff)
		for _, secret := range []string{"hunter2", "aHVudGVyMi1uZXc", "aHVudGVyMi1vbGQ", "d2Vi"} {
			if strings.Contains(r.Diff, secret) || strings.Contains(strings.Join(r.Paths, ","), secret) {
				t.Fatalf("%s %s leaks %q:\n%s", r.Kind, r.Name, secret, r.Diff)
			}
		}
	}
	if total > 2000 {
		t.Fatalf("diffs hold %d bytes, cap 2000", total)
	}
	// Uncapped, the Secret's diff is there, masked.
	if got, err = w.client.Diff(ctx, "sim", agent.DiffRequest{Apps: []string{"web-prod"}, Revision: rev}); err != nil {
		t.Fatal(err)
	}
	var s agent.ResourceDiff
	for _, r := range got[0].Resources {
		if r.Kind == "Secret" {
			s = r
		}
	}
	if !s.Masked || s.Values != nil || strings.Join(s.Paths, ",") != "data.password,metadata.labels.rotated" ||
		!strings.Contains(s.Diff, "+  password: (changed)") || !strings.Contains(s.Diff, "user: (hidden)") {
		t.Fatalf("secret: %+v\n%s", s, s.Diff)
	}
	for _, secret := range []string{"hunter2", "aHVudGVyMi1uZXc", "aHVudGVyMi1vbGQ", "d2Vi"} {
		if strings.Contains(s.Diff, secret) {
			t.Fatalf("the secret's diff leaks %q:\n%s", secret, s.Diff)
		}
	}
}

func TestDiffOfAnUnknownRevisionIsNotFound(t *testing.T) {
	w := startExample(t)
	_, err := w.client.Diff(context.Background(), "sim", agent.DiffRequest{Apps: []string{"web-prod"}, Revision: strings.Repeat("ab", 20)})
	if !errors.Is(err, agent.ErrNotFound) || !strings.Contains(err.Error(), "revision") {
		t.Fatalf("err = %v", err)
	}
}
