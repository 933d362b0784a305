package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/deploy/argocd"
	"github.com/prflow/prflow/queue"
)

// Issue 31 on the real Argo CD: 500 apps created in one burst (an ApplicationSet's list
// generator growing from 0 to 500 elements) are all recorded in prflow-apps without the watch
// stream being cut, and all become tombstones when the ApplicationSet is deleted. Argo CD's
// watch buffer (1,000 events) may drop part of the burst; the agent's early re-list or its
// periodic one (60s here) must repair it.
func TestRealBurstAllRecorded(t *testing.T) {
	const n = 500
	const resync = 60 * time.Second
	appSet := func(r *realEnv, count int) map[string]any {
		elems := make([]any, count)
		for i := range elems {
			elems[i] = map[string]any{"n": fmt.Sprintf("%03d", i)}
		}
		return map[string]any{
			"metadata": map[string]any{"name": r.set, "namespace": "argocd"},
			"spec": map[string]any{
				"generators": []any{map[string]any{"list": map[string]any{"elements": elems}}},
				"template": map[string]any{
					"metadata": map[string]any{"name": r.id + "-{{n}}", "labels": map[string]any{"prflow-burst": r.id}},
					"spec": map[string]any{"project": "default",
						"source":      map[string]any{"repoURL": r.url, "targetRevision": "main", "path": "apps/burst"},
						"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": r.id}},
				},
			},
		}
	}
	r := realSetupOpts(t, realOpts{
		files:  map[string]string{"apps/burst/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: burst\ndata:\n  k: v\n"},
		appSet: func(r *realEnv) map[string]any { return appSet(r, 0) },
	})

	cl, err := argocd.NewClient(argocd.ClientOptions{URL: r.vars["ARGOCD_URL"], Token: r.vars["ARGOCD_TOKEN"]})
	if err != nil {
		t.Fatal(err)
	}
	cl.Timeout = 60 * time.Second // a list of every app in a busy Argo CD
	a, err := argocd.New(argocd.Options{AgentID: "real", Client: cl, Resync: resync, Log: r.log})
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(t, func(ctx context.Context) { _ = a.Run(ctx, r.e.Conn) })
	r.waitFresh()
	ctx := context.Background()
	b, err := queue.OpenBuckets(ctx, r.e.Conn.JS)
	if err != nil {
		t.Fatal(err)
	}

	// records counts the agent's records of this test's apps: live ones and tombstones.
	records := func() (live, gone int) {
		lister, err := b.Apps.ListKeysFiltered(ctx, agent.Token("real")+".*")
		if err != nil {
			t.Fatal(err)
		}
		for k := range lister.Keys() {
			e, err := b.Apps.Get(ctx, k)
			if err != nil {
				continue
			}
			var s agent.AppStatus
			if agent.DecodeStatus(e.Value(), &s) != nil || s.ApplicationSet != r.set {
				continue
			}
			if s.Gone() {
				gone++
			} else {
				live++
			}
		}
		return live, gone
	}
	// argoApps is how many of this test's apps Argo CD lists.
	argoApps := func() int {
		code, body := r.api("GET", "/api/v1/applications?fields=items.metadata.name&selector="+url.QueryEscape("prflow-burst="+r.id), nil)
		if code != 200 {
			t.Fatalf("list applications: %d %s", code, body)
		}
		var l struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
	wait := func(what string, d time.Duration, cond func() bool) time.Duration {
		start := time.Now()
		for !cond() {
			if time.Since(start) > d {
				live, gone := records()
				t.Fatalf("timed out after %s waiting for %s: Argo CD lists %d apps; prflow-apps has %d live records, %d tombstones",
					d, what, argoApps(), live, gone)
			}
			time.Sleep(500 * time.Millisecond)
		}
		return time.Since(start)
	}

	connects := a.Connects()
	before := a.Resyncs()
	start := time.Now()
	if code, body := r.api("POST", "/api/v1/applicationsets?upsert=true", appSet(r, n)); code != 200 {
		t.Fatalf("grow the ApplicationSet to %d apps: %d %s", n, code, body)
	}
	generated := wait(fmt.Sprintf("Argo CD to have %d apps", n), 5*time.Minute, func() bool { return argoApps() == n })
	// Every app recorded within the resync interval (plus a margin) of the last one created.
	recorded := wait(fmt.Sprintf("%d records", n), resync+2*time.Minute, func() bool { live, _ := records(); return live == n })
	rs := a.Resyncs()
	t.Logf("REALTIME burst: %d apps generated in %.1fs; all recorded %.1fs later; re-lists %d (early %d), records repaired %d",
		n, generated.Seconds(), recorded.Seconds(), rs.Resyncs-before.Resyncs, rs.Early-before.Early, rs.Repaired-before.Repaired)
	if a.Connects() != connects {
		t.Fatalf("the watch stream was cut during the burst (%d connects, was %d)", a.Connects(), connects)
	}

	// The other way: the ApplicationSet deleted, its apps go, every record becomes a tombstone.
	if code, body := r.api("DELETE", "/api/v1/applicationsets/"+r.set, nil); code != 200 {
		t.Fatalf("delete the ApplicationSet: %d %s", code, body)
	}
	gone := wait(fmt.Sprintf("%d tombstones", n), resync+5*time.Minute, func() bool { live, gone := records(); return live == 0 && gone == n })
	t.Logf("REALTIME burst: all %d records tombstoned %.1fs after the ApplicationSet's deletion (total %.1fs)", n, gone.Seconds(), time.Since(start).Seconds())
}
