package queue

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log sink safe for the connecting goroutine and the test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// TestOpenWaitsForNATS: a worker started while its NATS is down keeps trying (warning in its
// log) and, once the server comes up on that address, connects and takes a job. Before, Open
// returned "connect to NATS ..." at once and the worker exited.
func TestOpenWaitsForNATS(t *testing.T) {
	addr := freePort(t)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type result struct {
		c   *Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := Open(ctx, Options{URL: "nats://" + addr, Name: "worker", Logger: log})
		done <- result{c, err}
	}()
	// Wait until the worker has failed at least twice and said so at warn level.
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(logs.String(), "level=WARN") < 2 {
		select {
		case r := <-done:
			t.Fatalf("Open returned before NATS was up: %v", r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no retry warnings logged: %q", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "NATS not reachable") || !strings.Contains(logs.String(), addr) {
		t.Fatalf("warning does not say what it waits for: %q", logs.String())
	}
	srv, err := StartEmbedded(t.TempDir(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	r := <-done
	if r.err != nil {
		t.Fatalf("Open after NATS came up: %v", r.err)
	}
	t.Cleanup(r.c.Close)
	pool(t, r.c, DefaultTuning, 1)
	m := next(t, puller(t, r.c.NC, 1, PullerConfig{}), 30*time.Second)
	if string(m.Data()) != `{"n":0}` {
		t.Fatalf("job = %s", m.Data())
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenGivesUpWhenContextEnds: nothing ever listens; Open ends with the context, naming the
// address and the cause, and a URL's password is not in the error.
func TestOpenGivesUpWhenContextEnds(t *testing.T) {
	addr := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err := Open(ctx, Options{URL: "nats://bot:s3cret@" + addr, Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("password leaked: %v", err)
	}
}

// TestOpenBadURLFailsAtOnce: a mistake in the URL is not retried.
func TestOpenBadURLFailsAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := Open(ctx, Options{URL: "nats://127.0.0.1:notaport", Logger: slog.New(slog.DiscardHandler)})
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 20*time.Second {
		t.Fatalf("bad URL was retried for %v", time.Since(start))
	}
}
