package ui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
)

// TestAgentsShowLastResync: the agents table says when a leader last re-listed its backend and
// how many records its re-lists repaired; a replica that never re-listed shows a dash.
func TestAgentsShowLastResync(t *testing.T) {
	t.Parallel()
	e, srv := newAnonUI(t, "dev")
	now := time.Now().UTC()
	last := time.Date(2026, 11, 28, 4, 5, 6, 0, time.UTC)
	for _, r := range []agent.Registration{
		{V: agent.Version, Agent: "eu", Replica: "r1", Kind: "argocd", Leader: true, Healthy: true, Apps: 3,
			LastResync: last, Resyncs: 3, Repaired: 7, Started: now, Seen: now, Expires: now.Add(time.Minute)},
		{V: agent.Version, Agent: "eu", Replica: "r2", Kind: "argocd", Healthy: true, Started: now, Seen: now, Expires: now.Add(time.Minute)},
	} {
		b, _ := json.Marshal(r)
		if _, err := e.Ctl.Buckets().Agents.Put(context.Background(), agent.RegistrationKey(r.Agent, r.Replica), b); err != nil {
			t.Fatal(err)
		}
	}
	code, _, page := do(t, client(t), "GET", srv.URL+"/ui/workers", nil, nil)
	if code != http.StatusOK {
		t.Fatalf("workers page: %d", code)
	}
	rows := strings.Split(page, `<tr data-agent="eu"`)
	if len(rows) != 3 {
		t.Fatalf("want 2 agent rows, page:\n%s", page)
	}
	if want := "2026-11-28 04:05:06Z (3 re-lists, 7 records repaired)"; !strings.Contains(rows[1], want) {
		t.Errorf("leader row lacks %q:\n%s", want, rows[1])
	}
	if !strings.Contains(rows[2], `<td class="resync">—</td>`) {
		t.Errorf("follower row should show no re-list:\n%s", rows[2])
	}
}
