package argocd

import (
	"context"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
)

// TestEmptyArgoCDIsAFreshView: the real Argo CD (v3.2.11) answers a watch with nothing, not
// even response headers, while it has no application. The agent must still report a fresh
// view of an empty Argo CD (a new install, before the first ApplicationSet generates an app)
// instead of timing the stream out and reconnecting forever as stale; the first app then
// arrives on the same stream. The failing version never became fresh.
func TestEmptyArgoCDIsAFreshView(t *testing.T) {
	w := newWorld(t)
	w.argo.QuietWhenEmpty()
	a := w.start("eu", "r1", func(o *Options, c *Client) { c.IdleTimeout = 20 * time.Second })
	defer a.stop()
	w.eventually(10*time.Second, "a fresh view of an empty Argo CD", func() bool {
		return w.client.View(context.Background(), "eu").Fresh
	})
	connects := a.connects.Load()
	w.addApp(app("web", "apps/web", nil))
	w.waitRecord("eu", "web", "the first app", func(s *agent.AppStatus) bool { return s != nil })
	if got := a.connects.Load(); got != connects {
		t.Errorf("the stream was opened %d more time(s): the first app must come on the stream that was waiting", got-connects)
	}
	if v := w.client.View(context.Background(), "eu"); !v.Fresh {
		t.Errorf("view after the first app: %s", v.Describe())
	}
}
