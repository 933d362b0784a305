package simagent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prflow/prflow/deploy/agent"
)

// The simulated agent takes update requests like the Argo CD agent: a Helm value makes the
// app OutOfSync until a sync deploys it; a targetRevision pins the app to a commit of the
// release repo (a later merge does not move it) and an unknown one is refused; the repo is
// never written; a repeated request of the same run+step reports the original source.
func TestUpdate(t *testing.T) {
	w := startSim(t, false)
	head := w.repo.git("rev-parse", "HEAD")
	w.waitRecord("web-dev", "deployed", func(s *agent.AppStatus) bool {
		return s != nil && s.Sync == agent.SyncSynced && s.Health == agent.HealthHealthy && s.SyncedRevision == head
	})
	ctx := context.Background()
	tag := func(v string) agent.SourcePatch {
		return agent.SourcePatch{Helm: &agent.HelmPatch{Parameters: []agent.HelmParameter{{Name: "image.tag", Value: v}}}}
	}
	rep, err := w.client.Update(ctx, "sim", agent.UpdateRequest{App: "web-dev", Patch: tag("2.0"), RunID: "r1", Step: "dev/upd"})
	if err != nil || !rep.Changed || rep.Before.Helm != nil || rep.After.Helm.Parameters[0].Value != "2.0" || rep.App.Sync != agent.SyncOutOfSync {
		t.Fatalf("update: %+v %v", rep, err)
	}
	again, err := w.client.Update(ctx, "sim", agent.UpdateRequest{App: "web-dev", Patch: tag("2.0"), RunID: "r1", Step: "dev/upd"})
	if err != nil || !again.Repeated || again.Before.Helm != nil || !again.Changed {
		t.Fatalf("repeat: %+v %v", again, err)
	}
	// Auto-sync does not pick the update up; a sync does.
	if _, err := w.client.Sync(ctx, "sim", agent.SyncRequest{Apps: []string{"web-dev"}, RunID: "r1", Step: "dev/sync"}); err != nil {
		t.Fatal(err)
	}
	w.waitRecord("web-dev", "Synced after the sync", func(s *agent.AppStatus) bool {
		return s.Sync == agent.SyncSynced && s.Operation != nil && s.Operation.Tagged("r1", "dev/sync") && s.Operation.Finished()
	})

	// Pin to the current commit, then merge: the app stays where it was pinned.
	rep, err = w.client.Update(ctx, "sim", agent.UpdateRequest{App: "web-dev", Patch: agent.SourcePatch{TargetRevision: &head}})
	if err != nil || rep.App.Source.TargetRevision != head {
		t.Fatalf("pin: %+v %v", rep, err)
	}
	merged := w.repo.merge("bump", map[string]string{"envs/dev/config.yaml": "env: dev\ncluster:\n  name: dev-eu\nimage: web:2.0\n"})
	w.waitRecord("web-dev", "still at the pinned commit", func(s *agent.AppStatus) bool {
		return s.Revision == head && s.Sync == agent.SyncSynced && s.SyncedRevision == head
	})
	main := "main"
	if _, err := w.client.Update(ctx, "sim", agent.UpdateRequest{App: "web-dev", Patch: agent.SourcePatch{TargetRevision: &main}}); err != nil {
		t.Fatal(err)
	}
	w.waitRecord("web-dev", "following main again, deployed by a sync", func(s *agent.AppStatus) bool { return s.Revision == merged })

	bad := "no-such-branch"
	if _, err := w.client.Update(ctx, "sim", agent.UpdateRequest{App: "web-dev", Patch: agent.SourcePatch{TargetRevision: &bad}}); !errors.Is(err, agent.ErrRejected) || !strings.Contains(err.Error(), "Unable to resolve 'no-such-branch'") {
		t.Errorf("unknown revision: %v", err)
	}
	if _, err := w.client.Update(ctx, "sim", agent.UpdateRequest{App: "web-nope", Patch: tag("1")}); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("unknown app: %v", err)
	}
	if _, err := w.client.Update(ctx, "sim", agent.UpdateRequest{App: "web-dev", Source: "0", Patch: tag("1")}); !errors.Is(err, agent.ErrInvalid) {
		t.Errorf("source on a single-source app: %v", err)
	}
	if st := w.repo.git("status", "--porcelain"); st != "" || w.repo.git("rev-parse", "HEAD") != merged {
		t.Errorf("the release repo was written: %q", st)
	}
}
