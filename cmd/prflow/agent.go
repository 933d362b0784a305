package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/prflow/prflow/deploy/argocd"
	"github.com/prflow/prflow/deploy/simagent"
	"github.com/prflow/prflow/deploy/syncwindow"
	"github.com/prflow/prflow/queue"
)

// newAgent is `prflow agent`: the GitOps agent next to Argo CD (or, with --sim-repo, the
// simulated agent over a release repo). It connects outbound to NATS (--nats).
func newAgent(g *globals) *cobra.Command {
	var (
		id, url, tokenFile, ca, ui, replica, namespace string
		insecure, embedded                             bool
		simRepo, simBranch, simAppSet                  string
		simDelay                                       time.Duration
		simWindows                                     []string
		timeout                                        time.Duration
		listen                                         string
		refreshMode, hookURL, hookSecretFile           string
		hookSecretEnv                                  string
		resync                                         time.Duration
		watchBuffer                                    int
		previewApps                                    bool
		previewProject                                 string
		previewMaxAge                                  time.Duration
		engine                                         string
		ff                                             fluxFlags
	)
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the GitOps agent: report Argo CD app status to prflow and sync apps on request",
		Example: "  prflow agent --nats nats://nats:4222 --agent-id prod-eu --argocd-url https://argocd.example \\\n" +
			"    --argocd-token-file /var/run/secrets/argocd/token",
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if err := g.requireNATS("agent", embedded); err != nil {
				return err
			}
			if id == "" {
				return errors.New("--agent-id is required (the agent name pipelines use in environments → clusters → agent)")
			}
			if resync <= 0 {
				return fmt.Errorf("--resync %s: want a positive duration, e.g. 5m", resync)
			}
			var nc atomic.Pointer[queue.Conn]
			reg := processRegistry()
			ops, err := listenOps(listen, reg, natsReady(&nc))
			if err != nil {
				return err
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			ops.run(ctx, log) // /healthz answers while NATS connects; /readyz once connected
			connect := func() (*queue.Conn, error) {
				conn, err := g.join(ctx, log, "prflow-agent-"+id)
				if err == nil {
					nc.Store(conn)
				}
				return conn, err
			}
			if simRepo != "" {
				windows, err := simSyncWindows(simWindows)
				if err != nil {
					return err
				}
				sa, err := simagent.New(simagent.Options{AgentID: id, Repo: simRepo, Branch: simBranch, AppSetPath: simAppSet,
					Delay: simDelay, SyncWindows: windows, Log: log, Version: version})
				if err != nil {
					return err
				}
				return runAgent(ctx, connect, sa)
			}
			switch engine {
			case "flux":
				return runFluxAgent(ctx, log, id, replica, ff, connect)
			case "argocd":
			default:
				return fmt.Errorf("--engine %q: want argocd or flux", engine)
			}
			if url == "" {
				return errors.New("--argocd-url is required (or --sim-repo for a simulated agent)")
			}
			if tokenFile == "" {
				return errors.New("--argocd-token-file is required: a file holding an Argo CD API token")
			}
			tok, err := os.ReadFile(tokenFile)
			if err != nil {
				return fmt.Errorf("--argocd-token-file: %w", err)
			}
			if strings.TrimSpace(string(tok)) == "" {
				return fmt.Errorf("--argocd-token-file %s is empty", tokenFile)
			}
			client, err := argocd.NewClient(argocd.ClientOptions{URL: url, Token: string(tok), CAFile: ca, Insecure: insecure})
			if err != nil {
				return err
			}
			client.Timeout = timeout
			if insecure {
				log.Warn("--argocd-insecure: TLS certificates of Argo CD are not verified")
			}
			refresh := argocd.AppSetRefreshOptions{Mode: refreshMode, WebhookURL: hookURL}
			if refresh.WebhookSecret, err = secretRef(hookSecretFile, hookSecretEnv, "appset-webhook-secret"); err != nil {
				return err
			}
			a, err := argocd.New(argocd.Options{AgentID: id, Replica: replica, Client: client, UIURL: ui, Namespace: namespace,
				AppSetRefresh: refresh, Resync: resync, WatchBuffer: watchBuffer, Version: version, Log: log,
				Preview: argocd.PreviewOptions{Enabled: previewApps, Project: previewProject, MaxAge: previewMaxAge}})
			if err != nil {
				return err
			}
			registerResyncMetrics(reg, a)
			return runAgent(ctx, connect, a)
		},
	}
	f := cmd.Flags()
	f.StringVar(&id, "agent-id", os.Getenv("PRFLOW_AGENT_ID"), "agent name used by pipelines (env PRFLOW_AGENT_ID)")
	f.StringVar(&listen, "listen", "", "serve /metrics, /healthz and /readyz on this address (e.g. :9090; empty: none)")
	f.BoolVar(&embedded, "embedded", false, "without --nats, run on a private embedded NATS server (tests and demos only: no controller reaches it)")
	f.StringVar(&url, "argocd-url", "", "Argo CD API base URL, e.g. https://argocd.example")
	f.StringVar(&tokenFile, "argocd-token-file", "", "file holding an Argo CD API token (argocd account generate-token)")
	f.StringVar(&ca, "argocd-ca", "", "PEM CA bundle to trust for Argo CD's TLS certificate")
	f.BoolVar(&insecure, "argocd-insecure", false, "do not verify Argo CD's TLS certificate (test setups only)")
	f.StringVar(&ui, "argocd-ui-url", "", "Argo CD UI base URL for app links (default --argocd-url)")
	f.StringVar(&namespace, "argocd-namespace", "argocd", "Argo CD's namespace; apps elsewhere are named namespace/name")
	f.StringVar(&replica, "replica", os.Getenv("POD_NAME"), "replica name when several run for one Argo CD (default host-pid; env POD_NAME)")
	f.DurationVar(&timeout, "argocd-timeout", 30*time.Second, "timeout of one Argo CD API call")
	f.StringVar(&refreshMode, "appset-refresh", argocd.RefreshAnnotate, "how to make Argo CD re-read git for an ApplicationSet after a merge: "+
		"annotate (the application-set-refresh annotation through Argo CD's API; needs applicationsets create+update), "+
		"webhook (a push event to the ApplicationSet controller's webhook) or off (wait for its 3-minute poll)")
	f.StringVar(&hookURL, "appset-webhook-url", "", "--appset-refresh webhook: the ApplicationSet controller's webhook, e.g. http://argocd-applicationset-controller:7000/api/webhook")
	f.StringVar(&hookSecretFile, "appset-webhook-secret-file", "", "--appset-refresh webhook: file holding the GitHub webhook secret (argocd-secret's webhook.github.secret)")
	f.StringVar(&hookSecretEnv, "appset-webhook-secret-env", "", "--appset-refresh webhook: name of the environment variable holding that secret")
	f.DurationVar(&resync, "resync", 5*time.Minute, "re-list every Argo CD app this often while watching (jittered), repairing records whose events Argo CD's watch stream dropped")
	f.BoolVar(&previewApps, "preview-apps", false, "let diff previews render changed and new app specs through temporary apps in --preview-project (writes to Argo CD; see docs/previews.md)")
	f.StringVar(&previewProject, "preview-project", argocd.DefaultPreviewProject, "AppProject of preview apps; it must permit no kind and deny every sync (docs/previews.md)")
	f.DurationVar(&previewMaxAge, "preview-max-age", 10*time.Minute, "preview apps older than this are leftovers, deleted when the agent starts")
	f.IntVar(&watchBuffer, "argocd-watch-buffer", 1000, "Argo CD's ARGOCD_WATCH_API_BUFFER_SIZE: after half this many events back to back the agent re-lists early (negative: never)")
	f.StringVar(&engine, "engine", "argocd", "GitOps engine the agent bridges: argocd or flux (Kustomizations and HelmReleases through the Kubernetes API)")
	f.StringVar(&ff.kubeconfig, "kubeconfig", "", "--engine flux: kubeconfig file (default: the in-cluster service account)")
	f.StringVar(&ff.namespace, "flux-namespace", "flux-system", "--engine flux: Flux's namespace; apps elsewhere are named namespace/name")
	f.DurationVar(&ff.stuckAfter, "flux-stuck-after", 2*time.Minute, "--engine flux: a reconcile request a controller has not handled for this long marks the app's record stale")
	f.StringVar(&simRepo, "sim-repo", "", "run the simulated agent on this release repo (path or git URL) instead of Argo CD")
	f.StringVar(&simBranch, "sim-branch", "", "simulated agent: branch to deploy (default the repo's HEAD branch)")
	f.StringVar(&simAppSet, "sim-appset", "", "simulated agent: path of the ApplicationSet manifest in the repo (default: search)")
	f.DurationVar(&simDelay, "sim-delay", 500*time.Millisecond, "simulated agent: delay before a sync starts deploying")
	f.StringArrayVar(&simWindows, "sim-sync-window", nil, `simulated agent: an Argo CD sync window for every app, as JSON: '{"kind":"deny","schedule":"0 22 * * *","duration":"8h","manualSync":true,"timeZone":"Europe/Paris"}' (repeatable)`)
	return cmd
}

// secretRef reads a secret given by reference: a file or the name of an environment variable
// (at most one). The value is never logged; errors name the reference, not the value.
func secretRef(file, env, what string) (string, error) {
	switch {
	case file != "" && env != "":
		return "", fmt.Errorf("--%s-file and --%s-env are exclusive", what, what)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--%s-file: %w", what, err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("--%s-file %s is empty", what, file)
		}
		return v, nil
	case env != "":
		v := strings.TrimSpace(os.Getenv(env))
		if v == "" {
			return "", fmt.Errorf("--%s-env: environment variable %s is empty or unset", what, env)
		}
		return v, nil
	}
	return "", nil
}

// simSyncWindows decodes --sim-sync-window values strictly: a misspelled key, in any case, is
// an error (encoding/json alone matches keys case-insensitively).
func simSyncWindows(vals []string) ([]syncwindow.Window, error) {
	known := []string{"kind", "schedule", "duration", "timeZone", "manualSync"}
	var out []syncwindow.Window
	for i, v := range vals {
		var keys map[string]json.RawMessage
		if err := json.Unmarshal([]byte(v), &keys); err != nil {
			return nil, fmt.Errorf("--sim-sync-window #%d %s: want a JSON object: %w", i+1, v, err)
		}
		for k := range keys {
			if !slices.Contains(known, k) {
				return nil, fmt.Errorf("--sim-sync-window #%d: unknown field %q (known: %s)", i+1, k, strings.Join(known, ", "))
			}
		}
		var w syncwindow.Window
		if err := json.Unmarshal([]byte(v), &w); err != nil {
			return nil, fmt.Errorf("--sim-sync-window #%d %s: %w", i+1, v, err)
		}
		if err := syncwindow.Parse(w); err != nil {
			return nil, fmt.Errorf("--sim-sync-window #%d: %w", i+1, err)
		}
		out = append(out, w)
	}
	return out, nil
}

// registerResyncMetrics exposes the agent's re-lists on /metrics.
func registerResyncMetrics(reg prometheus.Registerer, a *argocd.Agent) {
	counter := func(name, help string, v func(argocd.ResyncStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v(a.Resyncs())) })
	}
	reg.MustRegister(
		counter("prflow_agent_resyncs_total", "Full re-lists of Argo CD's apps finished (after connecting, periodic, early).", func(s argocd.ResyncStats) int64 { return s.Resyncs }),
		counter("prflow_agent_resyncs_early_total", "Re-lists started early because events arrived back to back (Argo CD's watch buffer may have overflowed).", func(s argocd.ResyncStats) int64 { return s.Early }),
		counter("prflow_agent_resyncs_failed_total", "Re-lists that failed while the watch stream was up.", func(s argocd.ResyncStats) int64 { return s.Failed }),
		counter("prflow_agent_resync_repaired_total", "App records re-lists found behind Argo CD while the watch stream was up (events the stream did not deliver).", func(s argocd.ResyncStats) int64 { return s.Repaired }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "prflow_agent_last_resync_timestamp_seconds", Help: "When the last full re-list finished (0: none yet)."}, func() float64 {
			if t := a.Resyncs().Last; !t.IsZero() {
				return float64(t.UnixNano()) / 1e9
			}
			return 0
		}),
	)
}

// runAgent connects to NATS once the agent of an engine (Argo CD, Flux, simulated) is built,
// so a bad flag fails before any connection, and runs it until ctx ends.
func runAgent(ctx context.Context, connect func() (*queue.Conn, error), a interface {
	Run(context.Context, *queue.Conn) error
}) error {
	conn, err := connect()
	if err != nil {
		return err
	}
	defer conn.Close()
	return a.Run(ctx, conn)
}
