package gitlab

import (
	"testing"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/scmconformance"
)

func TestParseWebhookPipelineEvents(t *testing.T) {
	const sha = "bcbb5ec396a2c0f828686f14fac9b80b780504f2"
	for _, tt := range []struct {
		status string
		want   scm.StatusState
	}{{"success", scm.StatusSuccess}, {"failed", scm.StatusFailure}, {"running", scm.StatusPending}, {"canceled", scm.StatusError}} {
		body := []byte(`{"object_kind":"pipeline","object_attributes":{"id":31,"sha":"` + sha + `","status":"` + tt.status + `"},"user":{"username":"ci"},"project":{"path_with_namespace":"acme/release"}}`)
		ev, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest("Pipeline Hook", body, string(hookSecret)), hookSecret))
		if err != nil || ev == nil {
			t.Fatalf("%s: %v %v", tt.status, ev, err)
		}
		if ev.Kind != scm.EventStatus || ev.Repo != "acme/release" || ev.SHA != sha || ev.State != tt.want || ev.Context != "pipeline" || ev.Sender != "ci" {
			t.Errorf("%s: %+v", tt.status, ev)
		}
	}
	body := []byte(`{"object_kind":"pipeline","object_attributes":{"status":"success"},"project":{"path_with_namespace":"acme/release"}}`)
	if ev, err := scmconformance.One(fixedParser().ParseWebhook(hookRequest("Pipeline Hook", body, string(hookSecret)), hookSecret)); err == nil {
		t.Errorf("pipeline without sha parsed as %+v", ev)
	}
}
