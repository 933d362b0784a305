// Package queue holds prflow's NATS side: the embedded server, connecting to an external
// cluster, the streams, consumers and KV buckets every component shares, the versioned job and
// event envelopes, leases, and the Puller workers take jobs with.
package queue

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Conn is a NATS connection with JetStream, plus the embedded server when there is one.
type Conn struct {
	NC       *nats.Conn
	JS       jetstream.JetStream
	embedded *server.Server
}

// Options say where NATS is.
type Options struct {
	URL       string // empty: start an embedded server
	DataDir   string // embedded: JetStream file store lives under DataDir/jetstream
	CredsFile string
	TLSCA     string
	TLSCert   string
	TLSKey    string
	Name      string // connection name shown in NATS monitoring
	// Listen makes the embedded server accept TCP clients on this address (e.g.
	// "127.0.0.1:4222") so other processes (workers, agents) can join. Empty: in-process only.
	Listen string
	Logger *slog.Logger
	// InboxPrefix replaces "_INBOX" for this connection's request replies (see RoleInbox).
	InboxPrefix string
}

// RoleInbox is the inbox prefix of a role's connections (server, worker, agent). Each role's
// NATS user may subscribe to its own prefix only (deploy/nats/permissions.conf), so one role
// never receives the replies another asked for: a worker cannot read the run state the server
// fetches.
func RoleInbox(role string) string { return "_INBOX_" + role }

// Open connects to NATS, starting an embedded server when no URL is given.
func Open(ctx context.Context, o Options) (*Conn, error) {
	if o.Name == "" {
		o.Name = "prflow"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	nopts := []nats.Option{nats.Name(o.Name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}
	if o.InboxPrefix != "" {
		nopts = append(nopts, nats.CustomInboxPrefix(o.InboxPrefix))
	}
	c := &Conn{}
	if o.URL == "" {
		s, err := StartEmbedded(o.DataDir, o.Listen)
		if err != nil {
			return nil, err
		}
		c.embedded = s
		nopts = append(nopts, nats.InProcessServer(s))
	} else {
		if o.CredsFile != "" {
			nopts = append(nopts, nats.UserCredentials(o.CredsFile))
		}
		if o.TLSCA != "" || o.TLSCert != "" {
			tc, err := tlsConfig(o)
			if err != nil {
				return nil, err
			}
			nopts = append(nopts, nats.Secure(tc))
		}
	}
	nc, err := connect(ctx, o, nopts)
	if err != nil {
		c.shutdownServer()
		return nil, err
	}
	c.NC = nc
	js, err := jetstream.New(nc)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	c.JS = js
	return c, nil
}

// Backoff between attempts to reach an external NATS that is not up yet.
const (
	connectBackoffMin = 250 * time.Millisecond
	connectBackoffMax = 10 * time.Second
)

// connect dials NATS. An external server that cannot be reached yet (down, restarting, not
// started) is retried with capped jittered backoff until ctx ends, so a worker or agent
// started before its server waits for it like a supervised daemon; other failures (TLS,
// credentials, a bad URL) are returned at once.
func connect(ctx context.Context, o Options, nopts []nats.Option) (*nats.Conn, error) {
	wait := connectBackoffMin
	for attempt := 1; ; attempt++ {
		nc, err := nats.Connect(o.URL, nopts...)
		if err == nil {
			if attempt > 1 {
				o.Logger.InfoContext(ctx, "connected to NATS", "url", redactURL(o.URL), "attempts", attempt)
			}
			return nc, nil
		}
		err = fmt.Errorf("connect to NATS %s: %w", redactURL(o.URL), err)
		if o.URL == "" || !errors.Is(err, nats.ErrNoServers) {
			return nil, err
		}
		d := wait/2 + rand.N(wait/2+1)
		o.Logger.WarnContext(ctx, "NATS not reachable, retrying", "url", redactURL(o.URL), "attempt", attempt, "wait", d, "err", err)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (gave up waiting: %w)", err, ctx.Err())
		case <-t.C:
		}
		wait = min(wait*2, connectBackoffMax)
	}
}

// StartEmbedded starts an in-process nats-server with JetStream on a file store under dir.
func StartEmbedded(dir, listen string) (*server.Server, error) {
	if dir == "" {
		dir = ".prflow"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	opts := &server.Options{
		ServerName: "prflow-embedded",
		JetStream:  true,
		StoreDir:   filepath.Join(dir, "jetstream"),
		NoSigs:     true,
		DontListen: listen == "",
		// A redelivered-after-crash job is published again under the same Nats-Msg-Id;
		// the per-stream Duplicates window (set in Setup) decides how long that dedups.
	}
	if listen != "" {
		host, port, err := splitHostPort(listen)
		if err != nil {
			return nil, err
		}
		opts.Host, opts.Port = host, port
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("embedded NATS did not become ready in 10s")
	}
	return s, nil
}

// Embedded returns the in-process server, or nil when connected to an external one.
func (c *Conn) Embedded() *server.Server { return c.embedded }

// ClientURL is the URL other processes can use to reach the embedded server ("" when it does
// not listen on TCP or when external).
func (c *Conn) ClientURL() string {
	if c.embedded == nil || c.embedded.Addr() == nil {
		return ""
	}
	return c.embedded.ClientURL()
}

// Close drains the connection and stops the embedded server.
func (c *Conn) Close() {
	if c.NC != nil {
		_ = c.NC.Drain()
		for i := 0; i < 100 && !c.NC.IsClosed(); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		c.NC.Close()
	}
	c.shutdownServer()
}

func (c *Conn) shutdownServer() {
	if c.embedded != nil {
		c.embedded.Shutdown()
		c.embedded.WaitForShutdown()
	}
}

func tlsConfig(o Options) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.TLSCA != "" {
		pem, err := os.ReadFile(o.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("NATS TLS CA %s: %w", o.TLSCA, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("NATS TLS CA %s: no PEM certificates found", o.TLSCA)
		}
		tc.RootCAs = pool
	}
	if o.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("NATS TLS client certificate %s: %w", o.TLSCert, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
