package steps

import (
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
)

// settle parks with the outage's start saved in the memo (a park that lost it would start
// the outage again on every wake and never fail), fails without rollback once the outage
// has lasted its limit, and forgets the start when every agent answers.
func TestOutageSettle(t *testing.T) {
	type memo struct{ OutageSince time.Time }
	sc := &Context{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Deadline: time.Now().Add(time.Hour)}
	say := outageWords{"apps could not be read", "agent not available; waiting", "waiting"}
	var out outage
	out.add(agent.View{Agent: "eu", Reason: "offline"})

	var m memo
	res, stop := out.settle(sc, &m, &m.OutageSince, time.Minute, false, say, "b-key", "a-key")
	if !stop || res.Status != Waiting || res.Wait == nil {
		t.Fatalf("outage: stop %v, %+v; want parked", stop, res)
	}
	var saved memo
	if err := json.Unmarshal(res.Memo, &saved); err != nil || saved.OutageSince.IsZero() {
		t.Errorf("parked memo %s (%v): the outage start is not saved", res.Memo, err)
	}
	if want := []string{"a-key", "b-key", agent.InventoryKey("eu")}; !slices.Equal(res.Wait.Keys, want) {
		t.Errorf("wait keys %q, want %q", res.Wait.Keys, want)
	}
	if !strings.HasPrefix(res.Wait.Reason, "waiting: agent eu") || res.Wait.Poll <= 0 || res.Wait.Poll > outagePoll {
		t.Errorf("wait %+v", res.Wait)
	}

	m.OutageSince = time.Now().Add(-2 * time.Minute)
	res, stop = out.settle(sc, &m, &m.OutageSince, time.Minute, false, say)
	if !stop || res.Status != Failed || !res.NoRollback || !strings.HasPrefix(res.Message, "apps could not be read: agent eu") {
		t.Errorf("outage past its limit: stop %v, %+v; want a failure without rollback", stop, res)
	}

	var none outage
	if res, stop := none.settle(sc, &m, &m.OutageSince, time.Minute, false, say); stop || !m.OutageSince.IsZero() {
		t.Errorf("every agent answered: stop %v, %+v, since %v; want to go on with no outage", stop, res, m.OutageSince)
	}
}
