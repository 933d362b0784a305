package harness

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prflow/prflow/pipelines"
)

const harnessRules = `notificationRules:
  - name: Slack on failure
    identifier: slack_fail
    pipelineEvents:
      - type: PipelineFailed
      - type: StageFailed
        forStages: [dev]
    notificationMethod:
      type: Slack
      spec:
        userGroups: []
        webhookUrl: <+secrets.getValue("org.team_slack_hook")>
    enabled: true
  - name: Plain hook
    identifier: plain_hook
    pipelineEvents:
      - type: AllEvents
    notificationMethod:
      type: Webhook
      spec:
        webhookUrl: https://hooks.example.com/plain-url-secret-0042
    enabled: true
  - name: Mail
    identifier: mail_rm
    pipelineEvents:
      - type: PipelineSuccess
      - type: StepFailed
      - type: StageSuccess
        forStages: [nope]
    notificationMethod:
      type: Email
      spec:
        userGroups: [release_managers]
        recipients: [rm@example.com]
    enabled: true
  - name: Teams
    identifier: teams
    pipelineEvents:
      - type: AllEvents
    notificationMethod:
      type: Msteams
      spec:
        msTeamKeys: [https://teams.example.com/x]
    enabled: true
  - name: Off
    identifier: off
    pipelineEvents:
      - type: AllEvents
    notificationMethod:
      type: Slack
      spec:
        webhookUrl: https://hooks.slack.com/off
    enabled: false`

// Harness notificationRules are carried to native rules naming channel references: a secret
// expression becomes a channel named after the secret, a plain URL a channel named after the
// rule, and the URL itself is never copied. With unsupported constructs allowed, what is not
// carried (user groups without a channel, step events, unknown stages, MS Teams) is left out
// with a warning at its own field, a disabled rule with one at the rule, and each carried rule
// says once which channel the workers must configure.
func TestNotificationRulesCarried(t *testing.T) {
	src := fill(base, map[string]string{"PIPE": harnessRules})
	m := testMap(t)
	m.Notify = NotifyMap{} // no channels for user groups
	res, err := Convert("p.yaml", []byte(src), Options{Map: m, AllowUnsupported: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	if strings.Contains(string(res.Native), "plain-url-secret-0042") || strings.Contains(string(res.Native), "hooks.slack.com") {
		t.Errorf("a webhook URL was copied into the pipeline:\n%s", res.Native)
	}
	type rule struct{ on, stages, channel string }
	var got []rule
	for _, r := range res.Pipeline.Notifications {
		got = append(got, rule{strings.Join(r.On, ","), strings.Join(r.Stages, ","), r.Channel})
	}
	want := []rule{
		{"run.failed", "", "team_slack_hook"},
		{"stage.failed", "dev", "team_slack_hook"},
		{"run.started,run.succeeded,run.failed", "", "plain_hook"},
		{"stage.started,stage.succeeded,stage.failed", "", "plain_hook"},
		{"run.succeeded", "", "mail_rm"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("rules\n%+v\nwant\n%+v\n%s", got, want, res.Native)
	}
	warns := map[int][]string{}
	for _, w := range res.Warnings {
		if !strings.Contains(w.Path, "notificationRules") {
			t.Errorf("unexpected warning %v", w)
			continue
		}
		warns[w.Line] = append(warns[w.Line], w.Error())
		if strings.Contains(w.Error(), "plain-url-secret-0042") {
			t.Errorf("warning shows the URL: %v", w)
		}
	}
	checks := []struct {
		mark string
		want []string
	}{
		{"- name: Slack on failure", []string{`carried to "team_slack_hook"`, `value of Harness secret "org.team_slack_hook"`}},
		{"- name: Plain hook", []string{`carried to "plain_hook"`, "not copied into the pipeline", "secret for the signature"}},
		{"- name: Mail", []string{`carried to "mail_rm"`, "to: rm@example.com"}},
		{"- type: StepFailed", []string{`left out: notification rule "mail_rm": event "StepFailed"`}},
		{"forStages: [nope]", []string{`rule "mail_rm": forStages nope (no such stage)`}},
		{"userGroups: [release_managers]", []string{`rule "mail_rm": user group "release_managers"`, "notifications.userGroups"}},
		{"type: Msteams", []string{`left out: notification rule "teams": method "Msteams"`}},
		{"- name: Off", []string{"disabled in Harness"}},
	}
	for _, c := range checks {
		line := lineOf(t, src, c.mark)
		ws := warns[line]
		if len(ws) != 1 {
			t.Errorf("warnings at line %d (%s): %q, want one", line, c.mark, ws)
			continue
		}
		for _, s := range c.want {
			if !strings.Contains(ws[0], s) {
				t.Errorf("warning %q lacks %q", ws[0], s)
			}
		}
		delete(warns, line)
	}
	if len(warns) > 0 {
		t.Errorf("more warnings: %v", warns)
	}
	if !strings.Contains(string(res.Native), "prflow worker --notifiers") {
		t.Errorf("the converted file does not say where channels are configured:\n%s", res.Native)
	}
	// The native text loads as is (a restarted controller reloads it without the converter).
	if _, err := pipelines.Load("native.yaml", res.Native, nil); err != nil {
		t.Errorf("native reload: %v", err)
	}

	// Strict, each of those is an error at its field, all in one report.
	_, err = Convert("p.yaml", []byte(src), Options{Map: m})
	checkErrs(t, src, loadErrs(t, err), []wantErr{
		{"- type: StepFailed", "StepFailed", "notificationRules[2].pipelineEvents[1].type", `notification rule "mail_rm": event "StepFailed"`},
		{"forStages: [nope]", "[nope]", "notificationRules[2].pipelineEvents[2].forStages", "no such stage"},
		{"userGroups: [release_managers]", "release_managers", "notificationRules[2].notificationMethod.spec.userGroups[0]", `user group "release_managers"`},
		{"type: Msteams", "Msteams", "notificationRules[3].notificationMethod.type", `method "Msteams"`},
	})
}

// The mapping file's notifications section resolves what prflow cannot: user groups, the
// secret a webhookUrl reads, a whole rule (MS Teams here); an empty list leaves a target out
// on purpose, with a warning and no error.
func TestNotificationRulesThroughTheMap(t *testing.T) {
	rules := strings.Replace(harnessRules, "\n      - type: StepFailed", "", 1)
	rules = strings.Replace(rules, "\n      - type: StageSuccess\n        forStages: [nope]", "", 1)
	src := fill(base, map[string]string{"PIPE": rules})
	m := testMap(t)
	m.Notify = NotifyMap{
		UserGroups: map[string][]string{"release_managers": {"rm-mail", "rm-slack"}},
		Secrets:    map[string][]string{"org.team_slack_hook": {"team-slack"}},
		Rules:      map[string][]string{"teams": {"oncall-hook"}},
	}
	res, err := Convert("p.yaml", []byte(src), Options{Map: m})
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	var got []string
	for _, r := range res.Pipeline.Notifications {
		got = append(got, strings.Join(r.On, ",")+strings.Join(r.Stages, ",")+">"+r.Channel)
	}
	want := []string{"run.failed>team-slack", "stage.faileddev>team-slack",
		"run.started,run.succeeded,run.failed>plain_hook", "stage.started,stage.succeeded,stage.failed>plain_hook",
		"run.succeeded>rm-mail", "run.succeeded>rm-slack", "run.succeeded>mail_rm",
		"run.started,run.succeeded,run.failed>oncall-hook", "stage.started,stage.succeeded,stage.failed>oncall-hook"}
	if !slices.Equal(got, want) {
		t.Errorf("rules\n%q\nwant\n%q", got, want)
	}

	m.Notify = NotifyMap{UserGroups: map[string][]string{"account.release_managers": {}}, Rules: map[string][]string{"teams": {}}}
	src = strings.Replace(src, "userGroups: [release_managers]", "userGroups: [account.release_managers]", 1)
	res, err = Convert("p.yaml", []byte(src), Options{Map: m})
	if err != nil {
		t.Fatalf("user group and rule mapped to no channel: %v", err)
	}
	var none []string
	for _, w := range res.Warnings {
		if strings.Contains(w.Msg, "gives") {
			none = append(none, w.Error())
		}
	}
	if len(none) != 2 || !strings.Contains(none[0], `user group "account.release_managers"`) || !strings.Contains(none[1], `rule "teams"`) {
		t.Errorf("warnings for targets mapped to []: %q", none)
	}
	for _, r := range res.Pipeline.Notifications {
		if r.Channel == "oncall-hook" || r.Channel == "rm-mail" {
			t.Errorf("rule for a target mapped to []: %+v", r)
		}
	}
}

// A pipeline shaped like Harness's Notifications-PR-Pipeline sample emails a user group when the pipeline succeeds.
// Strict conversion refuses it without a channel for the group, naming the rule, the group
// and where it is; with --allow-unsupported the rule is left out with that warning; with the
// map's notifications.userGroups entry it converts strictly into a prflow email notification.
func TestNotificationsPRPipeline(t *testing.T) {
	src, err := os.ReadFile("testdata/notifications_pr.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mapSrc, err := os.ReadFile("testdata/notifications_pr_map.yaml")
	if err != nil {
		t.Fatal(err)
	}
	withMap, err := ParseMap("notifications_pr_map.yaml", mapSrc)
	if err != nil {
		t.Fatal(err)
	}
	cut := strings.Index(string(mapSrc), "notifications:")
	noGroups, err := ParseMap("services_only.yaml", mapSrc[:cut])
	if err != nil || len(noGroups.Notify.UserGroups) != 0 {
		t.Fatalf("map without notifications: %v", err)
	}
	after := strings.Index(string(src), "notificationRules:")
	line, col := posOf(t, string(src[after:]), "- release_approvers", "release_approvers")
	line += strings.Count(string(src[:after]), "\n")
	inputs := map[string]any{"Stage1_updateReleaseRepo_replicaCount": "3"}
	for _, tc := range []struct {
		name     string
		m        *Map
		allow    bool
		errs     []string // the one error, holding these
		warn     string   // a warning at the group's line holding this
		channels []string
	}{
		{name: "strict without a channel for the group", m: noGroups,
			errs: []string{fmt.Sprintf("notifications_pr.yaml:%d:%d: pipeline.notificationRules[0].notificationMethod.spec.userGroups[0]: ", line, col),
				`unsupported: notification rule "notify_release_mail": user group "release_approvers"`, "notifications.userGroups"}},
		{name: "allowed without a channel for the group", m: noGroups, allow: true,
			warn: `left out: notification rule "notify_release_mail": user group "release_approvers"`},
		{name: "strict with the map", m: withMap, channels: []string{"release-mail"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Convert("notifications_pr.yaml", src, Options{Map: tc.m, Inputs: inputs, AllowUnsupported: tc.allow})
			if tc.errs != nil {
				errs := loadErrs(t, err)
				if len(errs) != 1 {
					t.Fatalf("want one error, got:\n%s", joinErrs(errs))
				}
				for _, s := range tc.errs {
					if !strings.Contains(errs[0].Error(), s) {
						t.Errorf("%v lacks %q", errs[0], s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var warned []string
			for _, w := range res.Warnings {
				warned = append(warned, w.Error())
				if tc.warn == "" || w.Line != line || w.Col != col || !strings.Contains(w.Msg, tc.warn) {
					t.Errorf("warning %v", w)
				}
			}
			if tc.warn != "" && len(warned) != 1 {
				t.Errorf("warnings %q, want one at %d:%d", warned, line, col)
			}
			var got []string
			for _, r := range res.Pipeline.Notifications {
				if !slices.Equal(r.On, []string{pipelines.EvRunSucceeded}) || len(r.Stages) > 0 {
					t.Errorf("rule %+v, want on run.succeeded for every stage", r)
				}
				got = append(got, r.Channel)
			}
			if !slices.Equal(got, tc.channels) {
				t.Errorf("channels %q, want %q\n%s", got, tc.channels, res.Native)
			}
			if _, err := pipelines.Load("native.yaml", res.Native, nil); err != nil {
				t.Errorf("native reload: %v", err)
			}
		})
	}
}

// The map's notifications section holds channel names only: an address, a webhook URL (not
// repeated in the error: it is the webhook's credential), a secret reference or anything that
// is no channel name is refused at its line:col.
func TestNotifyMapRefusesWhatBelongsToTheWorkers(t *testing.T) {
	src := `notifications:
  userGroups:
    ok_group: [release-mail, team-slack]
    mail_group: rm@example.com
    hook_group: https://hooks.slack.com/services/T000/B000/sekrit-0042
  secrets:
    org.slack: env:SLACK_URL
    org.other: "bad name!"
  rules:
    r1: {channel: x}
  userGroup: {}
`
	_, err := ParseMap("m.yaml", []byte(src))
	errs := loadErrs(t, err)
	for _, e := range errs {
		if strings.Contains(e.Error(), "sekrit-0042") {
			t.Errorf("the webhook URL is in the error: %v", e)
		}
	}
	for i, w := range []struct{ mark, token, path, msg string }{
		{"rm@example.com", "rm@", "notifications.userGroups.mail_group", `"rm@example.com" is an address: define an email channel`},
		{"hooks.slack.com", "https", "notifications.userGroups.hook_group", "a URL here (not repeated"},
		{"env:SLACK_URL", "env:", "notifications.secrets.org.slack", "secret reference"},
		{"bad name!", `"bad`, "notifications.secrets.org.other", "not a channel name"},
		{"r1: {channel: x}", "{", "notifications.rules.r1", "want a channel name"},
		{"userGroup: {}", "userGroup", "notifications.userGroup", `unknown field (did you mean "userGroups"?`},
	} {
		line, col := posOf(t, src, w.mark, w.token)
		if i >= len(errs) {
			t.Errorf("missing %s", w.path)
			continue
		}
		if e := errs[i]; e.Line != line || e.Col != col || e.Path != w.path || !strings.Contains(e.Msg, w.msg) {
			t.Errorf("problem %d: %v\nwant m.yaml:%d:%d: %s: …%s…", i, e, line, col, w.path, w.msg)
		}
	}
	if len(errs) != 6 {
		t.Errorf("%d problems, want 6:\n%s", len(errs), joinErrs(errs))
	}
}

// The mapping file shown in docs/harness.md parses, notifications included.
func TestDocsMapExample(t *testing.T) {
	readme, err := os.ReadFile("../../docs/harness.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "What Harness keeps in its SaaS comes from the map:\n\n```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("no map example in docs/harness.md")
	}
	m, err := ParseMap("docs/harness.md", []byte(block))
	if err != nil {
		t.Fatal(err)
	}
	if chs, ok := m.Notify.group("release_managers"); !ok || !slices.Equal(chs, []string{"release-mail", "rm-slack"}) {
		t.Errorf("release_managers → %q", chs)
	}
	if chs, ok := m.Notify.group("account.ops"); !ok || len(chs) != 0 {
		t.Errorf("account.ops → %q %v, want [] (left out)", chs, ok)
	}
	if chs, ok := m.Notify.group("org.release_managers"); !ok || chs[0] != "release-mail" {
		t.Errorf("a scoped name falls back to the plain one: %q", chs)
	}
}

// The controller converts runs' sources concurrently with one map: conversions share nothing
// else, and each gives the same answer as alone (run with -race).
func TestConvertConcurrentlyWithOneMap(t *testing.T) {
	m, err := LoadMap("testdata/notifications_pr_map.yaml")
	if err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile("testdata/notifications_pr.yaml")
	bad := []byte(strings.Replace(string(good), "minimumCount: 1", "minimumCount: one", 1))
	inputs := map[string]any{"Stage1_updateReleaseRepo_replicaCount": "3"}
	convert := func(src []byte) string {
		res, err := Convert("p.yaml", src, Options{Map: m, Inputs: inputs})
		if err != nil {
			return err.Error()
		}
		return string(res.Native)
	}
	want := map[bool]string{true: convert(good), false: convert(bad)}
	if !strings.Contains(want[true], "channel: release-mail") || !strings.Contains(want[false], "minimumCount: want a whole number") {
		t.Fatalf("alone:\n%s\n%s", want[true], want[false])
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := range 16 {
		wg.Add(1)
		go func(ok bool) {
			defer wg.Done()
			src := bad
			if ok {
				src = good
			}
			for range 4 {
				if got := convert(src); got != want[ok] {
					errs <- got
				}
			}
		}(i%2 == 0)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("a concurrent conversion differs:\n%s", e)
	}
}
