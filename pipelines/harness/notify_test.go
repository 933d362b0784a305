package harness

import (
	"slices"
	"strings"
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
// rule, and the URL itself is never copied. Each rule is reported once, at its line, with what
// the workers must configure and what was not carried (user groups, step events, unknown
// stages, MS Teams, a disabled rule).
func TestNotificationRulesCarried(t *testing.T) {
	src := fill(base, map[string]string{"PIPE": harnessRules})
	res, err := Convert("p.yaml", []byte(src), Options{Map: testMap(t)})
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
	warns := map[int]string{}
	for _, w := range res.Warnings {
		if !strings.Contains(w.Path, "notificationRules") {
			t.Errorf("unexpected warning %v", w)
			continue
		}
		if _, dup := warns[w.Line]; dup {
			t.Errorf("two warnings at line %d", w.Line)
		}
		warns[w.Line] = w.Error()
		if strings.Contains(w.Error(), "plain-url-secret-0042") {
			t.Errorf("warning shows the URL: %v", w)
		}
	}
	checks := []struct {
		mark string
		want []string
	}{
		{"- name: Slack on failure", []string{`carried to channel "team_slack_hook"`, `value of Harness secret "org.team_slack_hook"`}},
		{"- name: Plain hook", []string{`carried to channel "plain_hook"`, "not copied into the pipeline", "secret for the signature"}},
		{"- name: Mail", []string{`carried to channel "mail_rm"`, "to: rm@example.com", `event "StepFailed"`, "forStages nope", "userGroups"}},
		{"- name: Teams", []string{"not carried", `method "Msteams"`}},
		{"- name: Off", []string{"disabled in Harness"}},
	}
	for _, c := range checks {
		line := lineOf(t, src, c.mark)
		w, ok := warns[line]
		if !ok {
			t.Errorf("no warning at line %d (%s); warnings %v", line, c.mark, warns)
			continue
		}
		for _, s := range c.want {
			if !strings.Contains(w, s) {
				t.Errorf("warning %q lacks %q", w, s)
			}
		}
	}
	if len(warns) != len(checks) {
		t.Errorf("%d warnings, want %d: %v", len(warns), len(checks), warns)
	}
	if !strings.Contains(string(res.Native), "prflow worker --notifiers") {
		t.Errorf("the converted file does not say where channels are configured:\n%s", res.Native)
	}
	// The native text loads as is (a restarted controller reloads it without the converter).
	if _, err := pipelines.Load("native.yaml", res.Native, nil); err != nil {
		t.Errorf("native reload: %v", err)
	}
}
