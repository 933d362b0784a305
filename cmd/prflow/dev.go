package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/examples"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/worker"
)

// waitLive waits until the worker and the agent have registered (they start in the
// background), for at most 30 seconds.
func waitLive(ctx context.Context, b *queue.Buckets, ac *agent.Client, workerID, agentID string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		_, werr := b.Workers.Get(ctx, workerID)
		_, aerr := ac.Registered(ctx, agentID)
		if werr == nil && aerr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("prflow dev: worker %s or agent %s did not register in 30s (worker: %v; agent: %v)", workerID, agentID, werr, aerr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func newDev(g *globals) *cobra.Command {
	var pipelineFile, listen, user, agentID, logFile string
	var sets, groups []string
	var serve bool
	var hf harnessFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything in one process and run the example pipeline",
		Long: `dev starts an embedded NATS server, the controller, a worker, a git server holding
the example release repo (examples/release-repo) and a simulated GitOps agent in one process, runs the example pipeline (or --pipeline FILE), prints live progress and exits 0
when the run succeeds, non-zero otherwise. --serve keeps everything running with the HTTP API
on loopback, without authentication.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Progress goes to stdout; logs would interleave with it, so they go to --log-file,
			// or to stderr at warn unless --log-level asks for more.
			logOut := cmd.ErrOrStderr()
			if logFile != "" {
				f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
				if err != nil {
					return fmt.Errorf("--log-file: %w", err)
				}
				defer f.Close()
				logOut = f
			} else if !cmd.Flags().Changed("log-level") {
				g.logLevel = "warn"
			}
			log, err := g.logger(logOut)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("data-dir") {
				dir, err := os.MkdirTemp("", "prflow-dev-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				g.nats.DataDir = dir
			}
			name, src := examples.DefaultPipelineName, examples.DefaultPipeline()
			if pipelineFile != "" {
				if src, err = os.ReadFile(pipelineFile); err != nil {
					return err
				}
				name = filepath.Base(pipelineFile)
			}
			inputs, err := parseSets(sets)
			if err != nil {
				return err
			}
			if agentID == "" || user == "" {
				return fmt.Errorf("--agent-id and --user must not be empty")
			}
			hmap, err := hf.load()
			if err != nil {
				return err
			}
			// A Harness pipeline is converted with the map here, so its problems are printed
			// before anything starts.
			if src, err = hf.convert(name, src, inputs, false, cmd.ErrOrStderr()); err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return exitError{code: 1, msg: name + ": cannot be converted"}
			}
			// Listen before anything starts, so a taken port fails at once and no URL is printed
			// that nothing serves.
			var ln net.Listener
			if serve {
				if h, _, err := splitLoopback(listen); err != nil || h == "" {
					return fmt.Errorf("--listen %s: dev serves without authentication, so only on loopback", listen)
				}
				if ln, err = listenAPI(listen); err != nil {
					return err
				}
				defer ln.Close()
				listen = ln.Addr().String() // the port served, also for --listen 127.0.0.1:0
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			conn, err := g.connect(ctx, log, "prflow-dev")
			if err != nil {
				return err
			}
			defer conn.Close()
			ctl, err := controller.New(ctx, conn, controller.WithLogger(log), controller.WithMetrics(controller.NewMetrics(processRegistry())))
			if err != nil {
				return err
			}
			runCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan struct{}, 2)
			go func() { _ = ctl.Run(runCtx); done <- struct{}{} }()
			sb, err := startSandbox(runCtx, g.nats.DataDir, conn, log, agentID)
			if err != nil {
				return err
			}
			b, locks, err := openLocks(ctx, conn, "dev-worker")
			if err != nil {
				return err
			}
			// The sandbox's release repo answers for "release" and for every connector the
			// Harness map names, so a map written for a real forge runs here unchanged.
			conns := connector.Static{"release": sb.provider}
			if hmap != nil {
				for _, svc := range hmap.Services {
					if svc.ReleaseRepo != nil && svc.ReleaseRepo.Connector != "" {
						conns[svc.ReleaseRepo.Connector] = sb.provider
					}
				}
			}
			w := &worker.Worker{ID: "dev-worker", Concurrency: 4, Registry: steps.Default, Log: log, Version: version, DrainTimeout: 5 * time.Second,
				Secrets: []string{devToken},
				Services: steps.NewServices(map[string]any{
					steps.ServiceSCM:    conns,
					steps.ServiceLocks:  locks,
					steps.ServiceGitOps: agent.NewClient(conn.NC, b.Apps, b.Agents),
					// PR comments link to the run page where this sandbox serves one.
					steps.ServiceRunURL: func(id string) string {
						if !serve {
							return ""
						}
						return "http://" + listen + "/ui/runs/" + id
					},
				})}
			go func() { _ = w.Run(runCtx, conn); done <- struct{}{} }()
			defer func() { cancel(); <-done; <-done; sb.stop() }()

			if serve {
				// Notifications link to runs on this loopback server (links are never relative).
				ctl.SetFeedback(&controller.Feedback{ExternalURL: "http://" + listen})
				anon := &controller.Auth{Anonymous: &controller.User{Name: user, Groups: groups}}
				go func() {
					if err := serveAPI(runCtx, log, ctl, ln, anon, defaultHTTPTimeouts); err != nil {
						log.Error("API listener stopped", "addr", listen, "err", err)
					}
				}()
			}
			<-ctl.Ready()
			// Runs are checked against live workers and agents at start: wait for ours.
			if err := waitLive(ctx, b, agent.NewClient(conn.NC, b.Apps, b.Agents), w.ID, agentID); err != nil {
				return err
			}
			run, err := ctl.Start(ctx, controller.StartRequest{File: name, Source: src, Inputs: inputs, Executor: "dev"})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "prflow dev: run %s of pipeline %s (release repo %s, agent %q)\n", run.ID, run.Pipeline, sb.repoURL, agentID)
			if serve {
				fmt.Fprintf(out, "prflow dev: watch it live at http://%s/ui/runs/%s\n", listen, run.ID)
			}
			pr := newProgress(out)
			final, err := ctl.Wait(ctx, run.ID, pr.update)
			if err != nil {
				return err
			}
			printSummary(out, final, examples.ReleaseRepo(), time.Now()) // the sandbox's repo starts as the example

			if serve {
				fmt.Fprintf(out, "serving the web UI on http://%s/ui/ and the API on http://%s (Ctrl-C to stop)\n", listen, listen)
				<-ctx.Done()
			}
			return runOutcome(final)
		},
	}
	cmd.Flags().StringVar(&pipelineFile, "pipeline", "", "pipeline file to run instead of the built-in example")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "runtime input key=value (repeatable)")
	cmd.Flags().BoolVar(&serve, "serve", false, "keep running and serve the HTTP API on --listen")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "API address for --serve (loopback only)")
	cmd.Flags().StringVar(&user, "user", "dev", "with --serve: the user every API caller is (who approves)")
	cmd.Flags().StringSliceVar(&groups, "groups", []string{"dev"}, "with --serve: that user's groups (comma-separated), for approvals that name groups")
	cmd.Flags().StringVar(&agentID, "agent-id", "sim", "the simulated GitOps agent's id (the agent the pipeline's clusters and apps name)")
	hf.add(cmd)
	cmd.Flags().StringVar(&logFile, "log-file", "", "write logs (at --log-level, default info) to this file instead of stderr (default: stderr at warn, so that progress stays readable)")
	return cmd
}
