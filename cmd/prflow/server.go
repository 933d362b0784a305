package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/controller/oidc"
	"github.com/prflow/prflow/pipelines/controller/ui"
	"github.com/prflow/prflow/pipelines/harness"
	"github.com/prflow/prflow/pipelines/rbac"
	"github.com/prflow/prflow/steps"
)

func newServer(g *globals) *cobra.Command {
	var oidcFile string
	var listen, tokens, natsListen, webhooks, pipelineDir, externalURL, policyDir string
	var rbacFile string
	var retention audit.Retention
	var runsRetention controller.RunRetention
	var prComments bool
	var hf harnessFlags
	timeouts := defaultHTTPTimeouts
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the controller and its HTTP API",
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if tokens == "" && oidcFile == "" {
				return errors.New("--tokens FILE or --oidc FILE is required: the API authenticates every caller (see docs/security.md, Access, and docs/oidc.md)")
			}
			auth := &controller.Auth{}
			if tokens != "" {
				if auth, err = controller.LoadAuth(tokens); err != nil {
					return err
				}
			}
			var hooks *controller.Webhooks
			if webhooks != "" {
				if hooks, err = controller.LoadWebhooks(webhooks); err != nil {
					return err
				}
			}
			var triggers *controller.TriggerSet
			if pipelineDir != "" {
				if triggers, err = controller.LoadTriggerDir(pipelineDir, steps.Default); err != nil {
					return err
				}
			}
			if u, err := url.Parse(externalURL); externalURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
				return fmt.Errorf("--external-url %q: want an absolute http(s) URL such as https://prflow.example.com (links in statuses, comments and notifications)", externalURL)
			}
			if oidcFile != "" {
				cfg, err := oidc.LoadConfig(oidcFile, externalURL)
				if err != nil {
					return err
				}
				p, err := oidc.New(cmd.Context(), cfg, log)
				if err != nil {
					return err
				}
				auth.OIDC = p // API bearer ID tokens; serveAPI gives it to the UI for sign-in
			}
			ln, err := listenAPI(listen)
			if err != nil {
				return err
			}
			defer ln.Close()
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			g.nats.Listen = natsListen
			conn, err := g.connect(ctx, log, "prflow-server")
			if err != nil {
				return err
			}
			defer conn.Close()
			if u := conn.ClientURL(); u != "" {
				log.Info("embedded NATS listening", "url", u)
			}
			copts := []controller.Option{controller.WithLogger(log), controller.WithMetrics(controller.NewMetrics(processRegistry()))}
			if hf.mapFile != "" {
				m, err := hf.load()
				if err != nil {
					return err
				}
				copts = append(copts, controller.WithSourceConverter(harness.Converter(m, steps.Default, hf.allow, log)))
			}
			if err := audit.Setup(ctx, conn.JS, g.replicas, retention); err != nil {
				return err
			}
			log.Info("audit log", "stream", audit.Stream, "max-age", retention.MaxAge, "max-bytes", retention.MaxBytes)
			copts = append(copts, controller.WithAudit(&audit.Log{JS: conn.JS}), controller.WithRunRetention(runsRetention))
			log.Info("runs retention", "keep-days", int(runsRetention.MaxAge/(24*time.Hour)), "keep-count", runsRetention.KeepCount)
			if policyDir != "" {
				pe, err := openPolicies(ctx, policyDir, log)
				if err != nil {
					return err
				}
				copts = append(copts, controller.WithPolicy(pe))
			}
			if rbacFile != "" {
				f, err := rbac.OpenFile(rbacFile, log) // reloaded when it changes; a broken edit keeps the last good one
				if err != nil {
					return err
				}
				log.Info("rbac policy loaded", "file", rbacFile, "lines", len(f.Policy().Lines), "default", f.Policy().Default())
				copts = append(copts, controller.WithRBAC(f))
			} else {
				log.Warn("--rbac is unset: every authenticated caller may do everything (start, cancel, retry, roll back, read the audit log); approvals still check their approver lists")
			}
			ctl, err := controller.New(ctx, conn, copts...)
			if err != nil {
				return err
			}
			ctl.SetWebhooks(hooks)
			ctl.SetTriggers(triggers)
			ctl.SetFeedback(&controller.Feedback{ExternalURL: externalURL, Statuses: true, Comments: prComments})
			if externalURL == "" {
				// Links are never relative, so without it statuses, comments and notifications carry none.
				log.Warn("--external-url is unset: commit statuses, PR comments and notifications will not link to runs")
			}
			if hooks != nil {
				log.Info("webhooks enabled", "providers", hooks.Providers())
			}
			if triggers != nil {
				for _, p := range triggers.Pipelines {
					log.Info("pipeline triggers loaded", "file", p.File, "pipeline", p.Name, "triggers", len(p.Triggers))
				}
			}
			errc := make(chan error, 1)
			go func() { errc <- ctl.Run(ctx) }()
			if err := serveAPI(ctx, log, ctl, ln, auth, timeouts); err != nil {
				return err
			}
			return <-errc
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "HTTP API and web UI address (UI at /ui/)")
	addAuditRetention(cmd.Flags(), &retention)
	addRunsRetention(cmd.Flags(), &runsRetention)
	cmd.Flags().StringVar(&policyDir, "policies", "", "directory of Rego policies (packages prflow.pipeline, prflow.run, prflow.stage); reloaded when a file changes")
	cmd.Flags().StringVar(&tokens, "tokens", "", "tokens file mapping bearer tokens to users and groups")
	cmd.Flags().StringVar(&rbacFile, "rbac", "", "RBAC policy file (docs/rbac.md): who may do what on which pipeline/environment; reloaded when it changes")
	cmd.Flags().StringVar(&oidcFile, "oidc", "", "OIDC file: sign in to the UI with an identity provider and accept its ID tokens on the API (docs/oidc.md); needs --external-url")
	hf.add(cmd)
	cmd.Flags().StringVar(&natsListen, "nats-listen", "", "with the embedded NATS: also accept workers/agents on this address (e.g. 127.0.0.1:4222)")
	cmd.Flags().StringVar(&webhooks, "webhooks", "", "webhooks file: provider → secret (env:NAME or file:PATH); serves POST /hooks/<provider>")
	cmd.Flags().StringVar(&pipelineDir, "pipelines", "", "directory of pipeline files; those with triggers: start runs on matching webhooks")
	cmd.Flags().StringVar(&externalURL, "external-url", "", "URL people reach this server at; commit statuses and PR comments link to runs there")
	cmd.Flags().DurationVar(&timeouts.Header, "read-header-timeout", defaultHTTPTimeouts.Header, "HTTP: time a client has to send a request's headers")
	cmd.Flags().DurationVar(&timeouts.Body, "read-body-timeout", defaultHTTPTimeouts.Body, "HTTP: time a client has to send a request's body (webhooks, API calls), from the end of its headers")
	cmd.Flags().DurationVar(&timeouts.Idle, "idle-timeout", defaultHTTPTimeouts.Idle, "HTTP: how long an idle keep-alive connection stays open")
	cmd.Flags().BoolVar(&prComments, "pr-comments", true, "comment a summary on the PRs that UpdateReleaseRepo and RevertPR open")
	return cmd
}

// listenAPI opens --listen for the API and web UI. Commands call it before they start
// anything or print a URL, so a taken port fails at once, naming the address.
func listenAPI(listen string) (net.Listener, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", listen, err)
	}
	return ln, nil
}

// serveAPI serves a controller's HTTP API on ln (from listenAPI) until ctx ends.
func serveAPI(ctx context.Context, log *slog.Logger, ctl *controller.Controller, ln net.Listener, auth *controller.Auth, timeouts httpTimeouts) error {
	errc := make(chan error, 1)
	// The web UI (/ui/) in front of the API; it signs people in with the API's tokens.
	web := ui.New(ctl, auth, log)
	if p, ok := auth.OIDC.(*oidc.Provider); ok {
		web.SetOIDC(p)
	}
	srv := newHTTPServer(ui.Wrap(ctl.Handler(auth), web), timeouts)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("API and web UI listening", "addr", ln.Addr().String(), "ui", "http://"+ln.Addr().String()+"/ui/")
	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}

func splitLoopback(addr string) (string, string, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", err
	}
	if ip := net.ParseIP(h); h != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", p, nil
	}
	return h, p, nil
}
