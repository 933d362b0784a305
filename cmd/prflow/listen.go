package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/prflow/prflow/queue"
)

// processRegistry is a metrics registry holding the Go runtime and process collectors, which
// every prflow process (server, worker, agent) serves.
func processRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// opsServer serves a worker's or agent's /metrics, /healthz and /readyz (--listen).
type opsServer struct {
	srv *http.Server
	ln  net.Listener
}

// listenOps opens --listen for /metrics (reg), /healthz (the process runs) and /readyz (ready
// returns nil: e.g. NATS is connected). An empty address serves nothing.
func listenOps(listen string, reg *prometheus.Registry, ready func() error) (*opsServer, error) {
	if listen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return &opsServer{srv: newHTTPServer(mux, defaultHTTPTimeouts), ln: ln}, nil
}

// run serves until ctx ends. A nil server (no --listen) does nothing.
func (o *opsServer) run(ctx context.Context, log *slog.Logger) {
	if o == nil {
		return
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = o.srv.Shutdown(sctx)
	}()
	log.Info("metrics and health listening", "addr", o.ln.Addr().String(), "paths", "/metrics /healthz /readyz")
	go func() {
		if err := o.srv.Serve(o.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
}

// natsReady is /readyz of a process whose only dependency is NATS: ready once the
// connection is open (conn set) and while it is connected.
func natsReady(conn *atomic.Pointer[queue.Conn]) func() error {
	return func() error {
		c := conn.Load()
		if c == nil {
			return errors.New("connecting to NATS")
		}
		if !c.NC.IsConnected() {
			return errors.New("NATS disconnected")
		}
		return nil
	}
}
