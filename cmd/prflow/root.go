package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/queue"
)

type globals struct {
	logFormat string
	logLevel  string
	nats      queue.Options
	replicas  int
	server    string
	token     string
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "prflow",
		Short:         "Run GitOps PR pipelines on NATS JetStream",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       readBuildInfo().String(),
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	pf.StringVar(&g.nats.URL, "nats", os.Getenv("PRFLOW_NATS"), "NATS URL; empty runs an embedded server (env PRFLOW_NATS)")
	pf.StringVar(&g.nats.DataDir, "data-dir", ".prflow", "embedded NATS data directory")
	pf.StringVar(&g.nats.CredsFile, "nats-creds", "", "NATS credentials file")
	pf.StringVar(&g.nats.TLSCA, "nats-ca", "", "CA bundle for NATS TLS")
	pf.StringVar(&g.nats.TLSCert, "nats-cert", "", "client certificate for NATS TLS")
	pf.StringVar(&g.nats.TLSKey, "nats-key", "", "client key for NATS TLS")
	pf.IntVar(&g.replicas, "replicas", 1, "stream/KV replicas when creating the topology (3 on a cluster)")
	pf.StringVar(&g.server, "server", envOr("PRFLOW_SERVER", "http://127.0.0.1:8080"), "prflow server URL for client commands (env PRFLOW_SERVER)")
	pf.StringVar(&g.token, "token", "", "API bearer token for client commands: a value, env:NAME or file:PATH (default env PRFLOW_TOKEN)")
	root.AddCommand(newRerun(g), newRetry(g)) // actions.go
	root.AddCommand(newCanI(g))               // cani.go
	root.AddCommand(newDev(g), newServer(g), newWorker(g), newRun(g), newStatus(g), newCancel(g),
		newWorkers(g), newLogs(g), newRuns(g), newVersion(), newValidate(g), newApprove(g), newIntervene(g), newConnectors(g), newAgent(g), newImport(g), newSchema(g), newPolicy(g), newAudit(g),
		newEnvs(g), newEnv(g), newHistory(g))
	root.AddCommand(newLogin(g), newLogout(g)) // login.go
	for _, c := range root.Commands() {
		if slices.Contains(configRoles, c.Name()) {
			addConfigFlag(c)
		}
	}
	return root
}

func (g *globals) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch g.logFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: want text or json, got %q", g.logFormat)
}

// connect opens NATS (embedded when --nats is empty) and creates the topology.
func (g *globals) connect(ctx context.Context, log *slog.Logger, name string) (*queue.Conn, error) {
	o := g.nats
	o.Name, o.Logger, o.InboxPrefix = name, log, queue.RoleInbox("server")
	conn, err := queue.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := queue.Setup(ctx, conn.JS, g.replicas); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// join opens NATS for a worker or an agent. On an external NATS it only checks the topology
// (queue.Join): it never creates or changes streams, so those roles' NATS users need no
// stream-admin permission (deploy/nats/permissions.conf) and a worker's --replicas default
// cannot shrink a cluster's R3 streams. On an embedded server it owns the topology: Setup.
func (g *globals) join(ctx context.Context, log *slog.Logger, name string) (*queue.Conn, error) {
	if g.nats.URL == "" {
		return g.connect(ctx, log, name)
	}
	o := g.nats
	o.Name, o.Logger, o.InboxPrefix = name, log, queue.RoleInbox(roleOf(name))
	conn, err := queue.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := queue.Join(ctx, conn.JS, log); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// roleOf is the role in a connection name ("prflow-worker…" → "worker").
func roleOf(name string) string {
	for _, r := range []string{"worker", "agent"} {
		if strings.HasPrefix(name, "prflow-"+r) {
			return r
		}
	}
	return "server"
}

// requireNATS refuses to start a worker or agent without --nats: it would start a private
// embedded NATS server that no controller reaches and wait there forever. --embedded asks for
// that on purpose (a demo or test with everything sharing one data dir is `prflow dev`).
func (g *globals) requireNATS(role string, embedded bool) error {
	if g.nats.URL != "" || embedded {
		return nil
	}
	return fmt.Errorf("prflow %s needs --nats URL (or env PRFLOW_NATS): the NATS server of your prflow server "+
		"(e.g. `prflow server --nats-listen 127.0.0.1:4222` and then --nats nats://127.0.0.1:4222); "+
		"without it the %s would run on a private embedded NATS server that no controller reaches. "+
		"Give --embedded to do that on purpose", role, role)
}

func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

type exitCoder interface{ ExitCode() int }

type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }
func (e exitError) ExitCode() int { return e.code }

func asExit(err error, target *exitCoder) bool {
	var ee exitError
	if errors.As(err, &ee) {
		*target = ee
		return true
	}
	return false
}
