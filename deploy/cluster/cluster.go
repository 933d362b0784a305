// Package cluster runs prflow on a real three-node NATS JetStream cluster inside a test: three
// embedded nats-servers routed together on loopback, each with its own store directory, that
// a test can shut down and restart on the same directory and ports. The TestCluster… tests
// promote through controller replicas and workers connected to different nodes while the
// leader of the jobs stream or of the runs bucket is killed; TestPermissions… run the same
// promotion with the least-privilege users of deploy/nats/permissions.conf.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Name is the cluster name the nodes share.
const Name = "prflow-test"

// Node is one nats-server of the cluster.
type Node struct {
	Name       string
	Dir        string
	ClientPort int
	RoutePort  int

	mu  sync.Mutex
	srv *server.Server
}

// Cluster is three (or n) routed nats-servers with JetStream.
type Cluster struct {
	T     testing.TB
	Nodes []*Node
	// Configure, when set, changes each node's options before it starts (accounts, users).
	Configure func(*server.Options)
	// Log, when set, receives every node's log lines.
	Log server.Logger
}

// Start starts an n-node cluster; it stops at test cleanup. configure may be nil.
func Start(t testing.TB, n int, configure func(*server.Options), log server.Logger) *Cluster {
	t.Helper()
	c := &Cluster{T: t, Configure: configure, Log: log}
	// The stores' directory is made before Stop is registered: cleanups run last-in first-out,
	// so the nodes stop before their stores are removed (a running node keeps writing files).
	root := t.TempDir()
	t.Cleanup(c.Stop)
	// Free ports are found by listening and closing, so another process may take one before
	// a node binds it (a node then never becomes ready): start again on new ports.
	var err error
	for try := 1; try <= 3; try++ {
		if err = c.startAll(filepath.Join(root, fmt.Sprintf("try%d", try)), n); err == nil {
			break
		}
		t.Logf("cluster start %d: %v; trying again on other ports", try, err)
		c.Stop()
	}
	if err != nil {
		t.Fatal(err)
	}
	c.WaitJetStream(60 * time.Second)
	return c
}

func (c *Cluster) startAll(root string, n int) error {
	c.Nodes = nil
	for i := range n {
		c.Nodes = append(c.Nodes, &Node{Name: fmt.Sprintf("n%d", i+1), Dir: filepath.Join(root, fmt.Sprintf("n%d", i+1)),
			ClientPort: freePort(c.T), RoutePort: freePort(c.T)})
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, nd := range c.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- c.start(nd) }()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

func (c *Cluster) options(nd *Node) *server.Options {
	var routes []string
	for _, o := range c.Nodes {
		if o != nd {
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", o.RoutePort))
		}
	}
	o := &server.Options{
		ServerName: nd.Name,
		Host:       "127.0.0.1",
		Port:       nd.ClientPort,
		JetStream:  true,
		StoreDir:   nd.Dir,
		NoSigs:     true,
		Cluster:    server.ClusterOpts{Name: Name, Host: "127.0.0.1", Port: nd.RoutePort},
		Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
	}
	if c.Configure != nil {
		c.Configure(o)
	}
	return o
}

func (c *Cluster) start(nd *Node) error {
	s, err := server.NewServer(c.options(nd))
	if err != nil {
		return fmt.Errorf("node %s: %w", nd.Name, err)
	}
	if c.Log != nil {
		s.SetLogger(c.Log, false, false)
	}
	s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return fmt.Errorf("node %s not ready for connections in 30s", nd.Name)
	}
	nd.mu.Lock()
	nd.srv = s
	nd.mu.Unlock()
	return nil
}

// URL is one node's client URL.
func (nd *Node) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", nd.ClientPort) }

// Server is the running server, nil while the node is down.
func (nd *Node) Server() *server.Server {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.srv
}

// URLs lists every node's client URL, starting with node first (clients connect there first,
// and fail over to the others).
func (c *Cluster) URLs(first int) string {
	urls := []string{c.Nodes[first].URL()}
	for i, nd := range c.Nodes {
		if i != first {
			urls = append(urls, nd.URL())
		}
	}
	return strings.Join(urls, ",")
}

// Kill shuts a node down (its store stays on disk).
func (c *Cluster) Kill(nd *Node) {
	nd.mu.Lock()
	s := nd.srv
	nd.srv = nil
	nd.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart starts a killed node again on its store directory and ports.
func (c *Cluster) Restart(nd *Node) {
	c.T.Helper()
	if err := c.start(nd); err != nil {
		c.T.Fatal(err)
	}
}

// Stop shuts every node down.
func (c *Cluster) Stop() {
	for _, nd := range c.Nodes {
		c.Kill(nd)
	}
}

// Node returns the node named name, nil if none.
func (c *Cluster) Node(name string) *Node {
	for _, nd := range c.Nodes {
		if nd.Name == name {
			return nd
		}
	}
	return nil
}

// WaitJetStream waits until the cluster has a JetStream meta leader that answers.
func (c *Cluster) WaitJetStream(d time.Duration) {
	c.T.Helper()
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		last = c.pingJetStream()
		if last == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.T.Fatalf("cluster JetStream not ready after %s: %v", d, last)
}

func (c *Cluster) pingJetStream() error {
	for _, nd := range c.Nodes {
		s := nd.Server()
		if s == nil {
			continue
		}
		if !s.JetStreamIsCurrent() {
			return fmt.Errorf("node %s: JetStream not current", nd.Name)
		}
	}
	for _, nd := range c.Nodes {
		if s := nd.Server(); s != nil && s.JetStreamIsLeader() {
			return nil
		}
	}
	return errors.New("no JetStream meta leader")
}

// StreamLeader is the node leading a stream's raft group (a KV bucket is stream "KV_<bucket>").
func (c *Cluster) StreamLeader(ctx context.Context, js jetstream.JetStream, stream string) (*Node, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s info: %w", stream, err)
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return nil, fmt.Errorf("stream %s has no leader", stream)
	}
	if nd := c.Node(info.Cluster.Leader); nd != nil {
		return nd, nil
	}
	return nil, fmt.Errorf("stream %s led by unknown server %q", stream, info.Cluster.Leader)
}

// WaitCurrent waits until stream has a leader and all its replicas are current (a restarted
// node caught up).
func (c *Cluster) WaitCurrent(ctx context.Context, js jetstream.JetStream, stream string, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last string
	for time.Now().Before(deadline) {
		s, err := js.Stream(ctx, stream)
		if err == nil {
			info, err := s.Info(ctx)
			if err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
				ok := len(info.Cluster.Replicas) == len(c.Nodes)-1
				for _, r := range info.Cluster.Replicas {
					ok = ok && r.Current && !r.Offline
				}
				if ok {
					return nil
				}
				last = fmt.Sprintf("leader %s, replicas %+v", info.Cluster.Leader, info.Cluster.Replicas)
			} else if err != nil {
				last = err.Error()
			}
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("stream %s not current after %s: %s", stream, d, last)
}

// Connect dials the cluster as a plain client (for test checks), preferring node first.
func (c *Cluster) Connect(first int, opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, opts...)
	return nats.Connect(c.URLs(first), opts...)
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
