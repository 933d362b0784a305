package bitbucket

import (
	"testing"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/scmconformance"
)

func TestParseWebhookCommitStatusEvents(t *testing.T) {
	const sha = "d3d7f0a3b4c5"
	for _, tt := range []struct {
		key, state string
		want       scm.StatusState
	}{{"repo:commit_status_updated", "SUCCESSFUL", scm.StatusSuccess}, {"repo:commit_status_updated", "FAILED", scm.StatusFailure},
		{"repo:commit_status_created", "INPROGRESS", scm.StatusPending}, {"repo:commit_status_updated", "STOPPED", scm.StatusError}} {
		body := []byte(`{"actor":{"nickname":"ci"},"repository":{"full_name":"acme/release"},"commit_status":{"key":"build","state":"` + tt.state + `","commit":{"hash":"` + sha + `"}}}`)
		ev, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest(tt.key, body, sign(hookSecret, body)), hookSecret))
		if err != nil || ev == nil {
			t.Fatalf("%s: %v %v", tt.state, ev, err)
		}
		if ev.Kind != scm.EventStatus || ev.Repo != "acme/release" || ev.SHA != sha || ev.State != tt.want || ev.Context != "build" || ev.Sender != "ci" {
			t.Errorf("%s: %+v", tt.state, ev)
		}
	}
	body := []byte(`{"repository":{"full_name":"acme/release"},"commit_status":{"state":"SUCCESSFUL"}}`)
	if ev, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest("repo:commit_status_updated", body, sign(hookSecret, body)), hookSecret)); err == nil {
		t.Errorf("status without commit parsed as %+v", ev)
	}
}
