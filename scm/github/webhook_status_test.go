package github

import (
	"testing"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/scmconformance"
)

func TestParseWebhookStatusEvents(t *testing.T) {
	const sha = "6dcb09b5b57875f334f61aebed695e2e4193db5e"
	for _, tt := range []struct {
		event, body string
		ctx         string
		state       scm.StatusState
	}{
		{"status", `{"sha":"` + sha + `","state":"success","context":"ci/build","repository":{"full_name":"acme/release"},"sender":{"login":"ci"}}`, "ci/build", scm.StatusSuccess},
		{"status", `{"sha":"` + sha + `","state":"pending","context":"ci/build","repository":{"full_name":"acme/release"}}`, "ci/build", scm.StatusPending},
		{"check_run", `{"action":"completed","check_run":{"head_sha":"` + sha + `","name":"test","status":"completed","conclusion":"failure"},"repository":{"full_name":"acme/release"}}`, "test", scm.StatusFailure},
		{"check_run", `{"action":"created","check_run":{"head_sha":"` + sha + `","name":"test","status":"queued","conclusion":null},"repository":{"full_name":"acme/release"}}`, "test", scm.StatusPending},
		{"check_suite", `{"action":"completed","check_suite":{"head_sha":"` + sha + `","status":"completed","conclusion":"success"},"repository":{"full_name":"acme/release"}}`, "", scm.StatusSuccess},
	} {
		body := []byte(tt.body)
		ev, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest(tt.event, body, sign(hookSecret, body)), hookSecret))
		if err != nil || ev == nil {
			t.Fatalf("%s: %v %v", tt.event, ev, err)
		}
		if ev.Kind != scm.EventStatus || ev.Repo != "acme/release" || ev.SHA != sha || ev.Context != tt.ctx || ev.State != tt.state || ev.Provider != "github" {
			t.Errorf("%s: %+v", tt.event, ev)
		}
	}
	for _, bad := range []string{`{"state":"success","repository":{"full_name":"a/b"}}`, `{"sha":"x"}`, `{"sha": 1}`} {
		body := []byte(bad)
		if ev, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest("status", body, sign(hookSecret, body)), hookSecret)); err == nil {
			t.Errorf("%s: parsed as %+v", bad, ev)
		}
	}
}
