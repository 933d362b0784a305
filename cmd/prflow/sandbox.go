package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/prflow/prflow/deploy/simagent"
	"github.com/prflow/prflow/examples"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/gitengine"
	"github.com/prflow/prflow/scm/local"
	"github.com/prflow/prflow/scm/scmtest"
)

// devToken authenticates the dev sandbox's worker to its git server; it never leaves loopback.
const devToken = "prflow-dev-sandbox-token"

// sandbox is what `prflow dev` runs besides prflow itself: a real git smart-HTTP server on
// loopback holding the example release repo, the local (no-forge) driver on it, and the
// simulated GitOps agent deploying from it.
type sandbox struct {
	repoURL  string
	provider scm.Provider
	stop     func()
}

// sandboxPace is how fast the sandbox's simulated agent deploys: slow enough to watch a sync
// go by in `prflow dev`. The package's tests run it faster (pace_test.go).
var sandboxPace = struct{ Delay, Step, Poll time.Duration }{300 * time.Millisecond, 150 * time.Millisecond, 500 * time.Millisecond}

func startSandbox(ctx context.Context, dir string, conn *queue.Conn, log *slog.Logger, agentID string) (*sandbox, error) {
	gs, err := scmtest.OpenGitServer(filepath.Join(dir, "git"), scmtest.WithToken(devToken, "dev"))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := newHTTPServer(gs, defaultHTTPTimeouts)
	go func() { _ = srv.Serve(ln) }()
	gs.SetBaseURL("http://" + ln.Addr().String())
	if _, err := gs.CreateRepo("acme", "release", examples.ReleaseRepo()); err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("seed the example release repo: %w", err)
	}
	eng := gitengine.New(gitengine.WithBasicAuth("x-access-token", devToken), gitengine.WithTempDir(dir), gitengine.WithLogger(log))
	p, err := local.New(gs.URL(), local.WithEngine(eng), local.WithIdentity(scm.Signature{Name: "prflow dev", Email: "dev@prflow.invalid"}), local.WithLogger(log))
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	sim, err := simagent.New(simagent.Options{AgentID: agentID, Repo: gs.Dir("acme", "release"), Branch: "main",
		Delay: sandboxPace.Delay, Step: sandboxPace.Step, Poll: sandboxPace.Poll, Log: log, Version: version})
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	simCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = sim.Run(simCtx, conn) }()
	return &sandbox{repoURL: gs.CloneURL("acme", "release"), provider: p, stop: func() {
		cancel()
		<-done
		_ = srv.Close()
		_ = gs.Close()
	}}, nil
}
