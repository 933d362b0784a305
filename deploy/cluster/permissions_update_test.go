package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/queue"
)

// leasingUpdater answers update requests the way the Argo CD agent does: under a per-app lease
// in prflow-locks, with the agent's user.
type leasingUpdater struct{ leases *queue.Leases }

func (leasingUpdater) Sync(context.Context, agent.SyncRequest) ([]agent.SyncResult, error) {
	return nil, nil
}
func (leasingUpdater) Apps(context.Context, agent.AppsQuery) ([]agent.AppStatus, error) {
	return nil, nil
}
func (leasingUpdater) Get(context.Context, agent.GetRequest) (*agent.AppStatus, error) {
	return nil, agent.Errorf(agent.CodeNotFound, "none")
}

func (u leasingUpdater) Update(ctx context.Context, req agent.UpdateRequest) (*agent.UpdateReply, error) {
	l, err := u.leases.Acquire(ctx, queue.LeaseKey("agent-update", "perm", req.App), "r1")
	if err != nil {
		return nil, err
	}
	defer func() { _ = l.Release(context.Background()) }()
	b := agent.SourceSpec{Index: -1}
	a := req.Patch.Apply(b)
	return &agent.UpdateReply{App: &agent.AppStatus{Name: req.App}, Before: &b, After: &a, Changed: true}, nil
}

// TestPermissionsAgentUpdate: a worker's user may send an update request
// (prflow.agent.<agent>.update, covered by prflow.agent.>), an agent's user may answer it and
// hold the per-app update lease in prflow-locks; no permission violation is logged.
func TestPermissionsAgentUpdate(t *testing.T) {
	s, v, _ := permStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ac := s.open("agent", 2, "agent-perm")
	defer ac.Close()
	ab, err := queue.OpenBuckets(ctx, ac.JS)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := agent.Heartbeat(ctx, ab.Agents, time.Hour, func() agent.Registration {
		return agent.Registration{Agent: "perm", Replica: "r1", Kind: "test", Leader: true, Healthy: true}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	wait, err := agent.Serve(sctx, ac.NC, "perm", leasingUpdater{leases: &queue.Leases{KV: ab.Locks}}, agent.ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wc := s.open("worker", 1, "worker-perm")
	defer wc.Close()
	wb, err := queue.OpenBuckets(ctx, wc.JS)
	if err != nil {
		t.Fatal(err)
	}
	rev := "v2"
	rep, err := agent.NewClient(wc.NC, wb.Apps, wb.Agents).Update(ctx, "perm", agent.UpdateRequest{App: "web", Patch: agent.SourcePatch{TargetRevision: &rev}})
	if err != nil || rep.After.TargetRevision != "v2" {
		t.Fatalf("update as the worker's user: %+v %v", rep, err)
	}
	stop()
	wait()
	cancel()
	<-hb
	if l := v.list(); len(l) > 0 {
		t.Fatalf("%d permission violations with %s's users:\n%s", len(l), confPath, strings.Join(l, "\n"))
	}
}
