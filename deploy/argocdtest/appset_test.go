package argocdtest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func clusterConfig(name, address string) string {
	return `{"releaseTag":"k8s-v0.4","cluster":{"owner":"cluster-admin@company.com","address":"` + address +
		`","name":"` + name + `"},"asset_id":12345678}`
}

func guestbookAppSet(repoURL string) ApplicationSet {
	return ApplicationSet{
		Metadata: ObjectMeta{Name: "guestbook", Labels: map[string]string{"team": "web"}},
		Spec: ApplicationSetSpec{
			Generators: []ApplicationSetGenerator{{Git: &GitGenerator{
				RepoURL: repoURL, Revision: "main",
				Files: []GitFileGeneratorItem{{Path: "cluster-config/**/config.json"}, {Path: "cluster-config/**/disabled/*", Exclude: true}},
			}}},
			Template: ApplicationSetTemplate{
				Metadata: ApplicationSetTemplateMeta{
					Name: "{{cluster.name}}-guestbook",
					Labels: map[string]string{
						"harness.io/serviceRef": "guestbook", "harness.io/envRef": "{{path.basename}}", "org": "{{path[1]}}",
					},
				},
				Spec: ApplicationSpec{
					Project:     "default",
					Source:      &ApplicationSource{RepoURL: repoURL, TargetRevision: "main", Path: "apps/guestbook/{{cluster.name}}"},
					Destination: ApplicationDestination{Server: "{{cluster.address}}", Namespace: "guestbook-{{path.basename}}"},
					Info:        []Info{{Name: "asset", Value: "{{asset_id}}"}, {Name: "unknown", Value: "{{no.such.param}}"}},
				},
			},
		},
	}
}

func TestAppSetGitFilesGeneratorWithRealGit(t *testing.T) {
	g := newGitServer(t, "", "")
	repo := g.url("release")
	sha1 := g.commit("release", "main", map[string]string{
		"cluster-config/engineering/dev/config.json":        clusterConfig("dev", "https://10.0.0.1"),
		"cluster-config/engineering/prod/config.json":       clusterConfig("prod", "https://10.0.0.2"),
		"cluster-config/engineering/disabled/x/config.json": clusterConfig("disabled", "https://10.0.0.9"),
		"apps/guestbook/dev/cm.yaml":                        configMap("guestbook", "healthy"),
		"apps/guestbook/prod/cm.yaml":                       configMap("guestbook", "healthy"),
		"apps/guestbook/staging/cm.yaml":                    configMap("guestbook", "healthy"),
	})
	s := New(WithTimeline(3*time.Millisecond, 1))
	t.Cleanup(s.Close)
	if err := s.AddApplicationSet(guestbookAppSet(repo)); err != nil {
		t.Fatal(err)
	}
	as, _ := s.ApplicationSet("guestbook")

	names := func() string {
		var n []string
		for _, a := range s.Apps() {
			n = append(n, a.Metadata.Name)
		}
		return strings.Join(n, ",")
	}
	if got := names(); got != "dev-guestbook,prod-guestbook" {
		t.Fatalf("generated apps %q", got)
	}
	dev, _ := s.App("dev-guestbook")
	if dev.Metadata.Labels["harness.io/envRef"] != "dev" || dev.Metadata.Labels["org"] != "engineering" ||
		dev.Metadata.Labels["harness.io/serviceRef"] != "guestbook" {
		t.Fatalf("labels %v", dev.Metadata.Labels)
	}
	if dev.Spec.Destination.Server != "https://10.0.0.1" || dev.Spec.Destination.Namespace != "guestbook-dev" ||
		dev.Spec.Source.Path != "apps/guestbook/dev" {
		t.Fatalf("rendered spec %+v %+v", dev.Spec.Destination, dev.Spec.Source)
	}
	// Numbers go through float64 and %v, as upstream; unknown params stay.
	if dev.Spec.Info[0].Value != "1.2345678e+07" || dev.Spec.Info[1].Value != "{{no.such.param}}" {
		t.Fatalf("info %+v", dev.Spec.Info)
	}
	if len(dev.Metadata.OwnerReferences) != 1 {
		t.Fatalf("owner refs %+v", dev.Metadata.OwnerReferences)
	}
	if o := dev.Metadata.OwnerReferences[0]; o.Kind != "ApplicationSet" || o.Name != "guestbook" || o.UID != as.Metadata.UID ||
		o.APIVersion != "argoproj.io/v1alpha1" || o.Controller == nil || !*o.Controller {
		t.Fatalf("owner ref %+v", o)
	}
	if dev.Status.Sync.Status != SyncStatusOutOfSync || dev.Status.Sync.Revision != sha1 || dev.Status.Health.Status != HealthMissing {
		t.Fatalf("generated app not reconciled against git: %s at %s", state(dev), dev.Status.Sync.Revision)
	}

	r := call(t, s, "GET", "/api/v1/applicationsets/guestbook", nil)
	var got ApplicationSet
	r.json(t, &got)
	if got.Status.ResourcesCount != 2 || got.Status.Resources[0].Kind != "Application" || got.Status.Resources[0].Name != "dev-guestbook" ||
		got.Status.Resources[0].Status != SyncStatusOutOfSync {
		t.Fatalf("appset status resources %s", r.body)
	}
	upToDate := false
	for _, c := range got.Status.Conditions {
		upToDate = upToDate || (c.Type == "ResourcesUpToDate" && c.Status == "True")
	}
	if !upToDate {
		t.Fatalf("conditions %+v", got.Status.Conditions)
	}
	var list ApplicationSetList
	call(t, s, "GET", "/api/v1/applicationsets?selector=team%3Dweb", nil).json(t, &list)
	if len(list.Items) != 1 || list.Items[0].Metadata.Name != "guestbook" {
		t.Fatalf("appset list %+v", list.Items)
	}
	call(t, s, "GET", "/api/v1/applicationsets?selector=team%3Dother", nil).json(t, &list)
	if len(list.Items) != 0 {
		t.Fatal("selector not applied to appsets")
	}

	// A new config file merged into git: the app appears on the next
	// reconciliation, not before (like Kargo #3859's race).
	st := openStream(t, s, "selector=harness.io/serviceRef%3Dguestbook", "")
	st.next()
	st.next()
	sha2 := g.commit("release", "main", map[string]string{"cluster-config/engineering/staging/config.json": clusterConfig("staging", "https://10.0.0.3")})
	if _, ok := s.App("staging-guestbook"); ok {
		t.Fatal("app exists before any reconciliation")
	}
	s.Reconcile()
	staging, ok := s.App("staging-guestbook")
	if !ok || staging.Status.Sync.Revision != sha2 || staging.Metadata.Labels["harness.io/envRef"] != "staging" {
		t.Fatalf("staging app after Reconcile: %v %+v", ok, staging.Status.Sync)
	}
	st.until(func(ev ApplicationWatchEvent) bool {
		return ev.Type == EventAdded && ev.Application.Metadata.Name == "staging-guestbook"
	})

	// Syncing a generated app works against the real repo.
	call(t, s, "POST", "/api/v1/applications/staging-guestbook/sync", map[string]any{})
	waitApp(t, s, "staging-guestbook", func(a Application) bool {
		return state(a) == "Synced/Healthy/Succeeded" && a.Status.Sync.Revision == sha2
	})

	// Removing a config file deletes its app.
	g.commit("release", "main", nil, "cluster-config/engineering/prod/config.json")
	s.Reconcile()
	if _, ok := s.App("prod-guestbook"); ok {
		t.Fatal("prod-guestbook survived the removal of its config file")
	}
	st.until(func(ev ApplicationWatchEvent) bool {
		return ev.Type == EventDeleted && ev.Application.Metadata.Name == "prod-guestbook"
	})
	if got := names(); got != "dev-guestbook,staging-guestbook" {
		t.Fatalf("apps after removal %q", got)
	}
}

func TestAppSetErrorsAndPolicies(t *testing.T) {
	mg := NewMemGit()
	repo := "https://git.example/release.git"
	mg.Commit(repo, "main", map[string]string{
		"envs/dev/config.yaml": "cluster:\n  name: dev\n",
		"apps/dev/cm.yaml":     configMap("x", "healthy"),
	})
	s := New(WithGitReader(mg), WithTimeline(3*time.Millisecond, 1))
	t.Cleanup(s.Close)
	as := guestbookAppSet(repo)
	as.Spec.Generators[0].Git.Files = []GitFileGeneratorItem{{Path: "envs/*/config.yaml"}}
	as.Spec.Template.Spec.Source.Path = "apps/{{cluster.name}}"
	as.Spec.Template.Spec.Destination.Server = "https://kubernetes.default.svc"
	as.Spec.SyncPolicy = &ApplicationSetSyncPolicy{ApplicationsSync: "create-update"}
	if err := s.AddApplicationSet(as); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.App("dev-guestbook"); !ok {
		t.Fatal("YAML config file not generated")
	}
	// A broken config file fails generation; existing apps are kept.
	mg.Commit(repo, "main", map[string]string{"envs/qa/config.yaml": "cluster: [unclosed\n"})
	s.Reconcile()
	got, _ := s.ApplicationSet("guestbook")
	var errCond *ApplicationSetCondition
	for i, c := range got.Status.Conditions {
		if c.Type == "ErrorOccurred" {
			errCond = &got.Status.Conditions[i]
		}
	}
	if errCond == nil || errCond.Status != "True" || !strings.Contains(errCond.Message, "unable to process file 'envs/qa/config.yaml'") {
		t.Fatalf("conditions %+v", got.Status.Conditions)
	}
	if _, ok := s.App("dev-guestbook"); !ok {
		t.Fatal("a failed generation must not delete apps")
	}
	// create-update never deletes.
	mg.Commit(repo, "main", nil, "envs/qa/config.yaml", "envs/dev/config.yaml")
	s.Reconcile()
	if _, ok := s.App("dev-guestbook"); !ok {
		t.Fatal("create-update policy must not delete apps")
	}
	if err := s.DeleteApplicationSet("guestbook"); err != nil {
		t.Fatal(err)
	}
	if len(s.Apps()) != 0 {
		t.Fatal("deleting the appset deletes its apps")
	}
}

func TestAppSetListAndGoTemplate(t *testing.T) {
	mg := NewMemGit()
	repo := "https://git.example/release.git"
	mg.Commit(repo, "main", map[string]string{
		"clusters/eu/west/config.json": `{"cluster":{"name":"eu-west"},"replicas":3}`,
		"apps/eu-west/cm.yaml":         configMap("x", "healthy"),
		"apps/blue/cm.yaml":            configMap("x", "healthy"),
	})
	s := New(WithGitReader(mg), WithTimeline(3*time.Millisecond, 1))
	t.Cleanup(s.Close)
	goTmpl := ApplicationSet{
		Metadata: ObjectMeta{Name: "gotmpl"},
		Spec: ApplicationSetSpec{
			GoTemplate:        true,
			GoTemplateOptions: []string{"missingkey=error"},
			Generators: []ApplicationSetGenerator{{Git: &GitGenerator{RepoURL: repo, Revision: "main",
				Files: []GitFileGeneratorItem{{Path: "clusters/**/config.json"}}}}},
			Template: ApplicationSetTemplate{
				Metadata: ApplicationSetTemplateMeta{Name: "{{.cluster.name}}-app",
					Labels: map[string]string{"region": "{{index .path.segments 1}}", "file": "{{.path.filename}}"}},
				Spec: ApplicationSpec{Source: &ApplicationSource{RepoURL: repo, Path: "apps/{{.cluster.name}}"},
					Destination: ApplicationDestination{Server: "https://kubernetes.default.svc", Namespace: "{{.path.basename}}"}},
			},
		},
	}
	if err := s.AddApplicationSet(goTmpl); err != nil {
		t.Fatal(err)
	}
	a, ok := s.App("eu-west-app")
	if !ok || a.Metadata.Labels["region"] != "eu" || a.Metadata.Labels["file"] != "config.json" || a.Spec.Destination.Namespace != "west" {
		t.Fatalf("goTemplate app %v %+v %+v", ok, a.Metadata.Labels, a.Spec.Destination)
	}
	list := ApplicationSet{
		Metadata: ObjectMeta{Name: "colors"},
		Spec: ApplicationSetSpec{
			Generators: []ApplicationSetGenerator{{List: &ListGenerator{Elements: []json.RawMessage{
				json.RawMessage(`{"color":"blue","values":{"tier":"front"}}`),
			}}}},
			Template: ApplicationSetTemplate{
				Metadata: ApplicationSetTemplateMeta{Name: "{{color}}", Labels: map[string]string{"tier": "{{values.tier}}"}},
				Spec: ApplicationSpec{Source: &ApplicationSource{RepoURL: repo, Path: "apps/{{color}}"},
					Destination: ApplicationDestination{Server: "https://kubernetes.default.svc"}},
			},
		},
	}
	if err := s.AddApplicationSet(list); err != nil {
		t.Fatal(err)
	}
	if a, ok := s.App("blue"); !ok || a.Metadata.Labels["tier"] != "front" || a.Status.Sync.Status != SyncStatusOutOfSync {
		t.Fatalf("list generator app %v %+v", ok, a)
	}
	// A name clash between appsets is reported, not silently taken over.
	clash := list
	clash.Metadata.Name = "colors2"
	if err := s.AddApplicationSet(clash); err != nil {
		t.Fatal(err)
	}
	got, _ := s.ApplicationSet("colors2")
	if len(got.Status.Conditions) == 0 || !strings.Contains(got.Status.Conditions[0].Message, "not owned by ApplicationSet colors2") {
		t.Fatalf("clash conditions %+v", got.Status.Conditions)
	}
}

// Like Argo CD's ApplicationSet controller, which watches the Applications it owns: an app
// deleted by hand comes back at once as a new object (new uid, later creationTimestamp), the
// stream shows DELETED then ADDED, and while it is away GET answers 403. An app the set no
// longer generates (renamed in the template) is replaced by the new name and deleted.
func TestAppSetRecreatesADeletedAppAndRenames(t *testing.T) {
	mg := NewMemGit()
	repo := "https://git.example/release.git"
	mg.Commit(repo, "main", map[string]string{"apps/blue/cm.yaml": configMap("x", "healthy")})
	s := New(WithGitReader(mg), WithTimeline(3*time.Millisecond, 1), WithAppSetPollInterval(-1))
	t.Cleanup(s.Close)
	set := ApplicationSet{
		Metadata: ObjectMeta{Name: "colors"},
		Spec: ApplicationSetSpec{
			Generators: []ApplicationSetGenerator{{List: &ListGenerator{Elements: []json.RawMessage{json.RawMessage(`{"color":"blue"}`)}}}},
			Template: ApplicationSetTemplate{
				Metadata: ApplicationSetTemplateMeta{Name: "{{color}}"},
				Spec: ApplicationSpec{Project: "default", Source: &ApplicationSource{RepoURL: repo, Path: "apps/{{color}}"},
					Destination: ApplicationDestination{Server: "https://kubernetes.default.svc", Namespace: "colors"}},
			},
		},
	}
	if err := s.AddApplicationSet(set); err != nil {
		t.Fatal(err)
	}
	old := getApp(t, s, "blue")
	if old.Metadata.UID == "" || old.Metadata.CreationTimestamp.IsZero() {
		t.Fatalf("app without uid or creationTimestamp: %+v", old.Metadata)
	}
	st := openStream(t, s, "", "")
	st.until(func(ev ApplicationWatchEvent) bool { return ev.Application.Metadata.Name == "blue" })
	if r := call(t, s, "DELETE", "/api/v1/applications/blue?cascade=false", nil); r.status != 200 {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	evs := st.until(func(ev ApplicationWatchEvent) bool {
		return ev.Type == EventAdded && ev.Application.Metadata.Name == "blue"
	})
	sawDeleted := false
	for _, ev := range evs {
		if ev.Type == EventDeleted && ev.Application.Metadata.UID == old.Metadata.UID {
			sawDeleted = true
		}
	}
	back := evs[len(evs)-1].Application
	if !sawDeleted || back.Metadata.UID == old.Metadata.UID || back.Metadata.UID == "" ||
		back.Metadata.CreationTimestamp.Time.Before(old.Metadata.CreationTimestamp.Time) {
		t.Fatalf("deleted=%v; recreated app uid %q (old %q), created %v (old %v)", sawDeleted, back.Metadata.UID, old.Metadata.UID,
			back.Metadata.CreationTimestamp, old.Metadata.CreationTimestamp)
	}
	// Rename through the template: the new app appears, the old one goes, GET of it is 403.
	set.Spec.Template.Metadata.Name = "{{color}}-v2"
	if r := call(t, s, "POST", "/api/v1/applicationsets?upsert=true", set); r.status != 200 {
		t.Fatalf("upsert: %d %s", r.status, r.body)
	}
	var added, deleted bool
	st.until(func(ev ApplicationWatchEvent) bool {
		added = added || (ev.Type == EventAdded && ev.Application.Metadata.Name == "blue-v2")
		deleted = deleted || (ev.Type == EventDeleted && ev.Application.Metadata.Name == "blue")
		return added && deleted
	})
	if r := call(t, s, "GET", "/api/v1/applications/blue", nil); r.status != 403 {
		t.Fatalf("GET of the renamed-away app: %d %s, want 403", r.status, r.body)
	}
	if a := getApp(t, s, "blue-v2"); a.Spec.Destination.Namespace != "colors" {
		t.Fatalf("renamed app %+v", a.Spec.Destination)
	}
}
