package main

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// holdPort keeps a loopback port taken for the test and returns its address.
func holdPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// runFor runs the command in-process and fails the test if it has not returned within d
// (a command that serves nothing must not keep running as if it did).
func runFor(t *testing.T, d time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out, err := runCtx(ctx, args...)
	if ctx.Err() != nil {
		t.Fatalf("%v still running after %s (err %v):\n%s", args, d, err, out)
	}
	return out, err
}

// TestDevServeTakenPort: prflow dev --serve on a port another process holds fails at once with
// the address in the error, before any run starts, and prints no URL it does not serve.
func TestDevServeTakenPort(t *testing.T) {
	addr := holdPort(t)
	out, err := runFor(t, 60*time.Second, "dev", "--serve", "--listen", addr)
	if err == nil || !strings.Contains(err.Error(), "--listen "+addr) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("want an error naming --listen %s, got %v\n%s", addr, err, out)
	}
	if strings.Contains(out, "http://") || strings.Contains(out, "prflow dev: run ") {
		t.Errorf("printed a URL or started a run although nothing is served:\n%s", out)
	}
}

// TestServerTakenPort: prflow server fails the same way, before connecting to NATS.
func TestServerTakenPort(t *testing.T) {
	dir := t.TempDir()
	tokens := tokensFile(t, dir, "a", "PRFLOW_TEST_LISTEN_TOKEN", "listen-token-0123456789")
	addr := holdPort(t)
	out, err := runFor(t, 60*time.Second, "server", "--listen", addr, "--tokens", tokens, "--data-dir", filepath.Join(dir, "nats"))
	if err == nil || !strings.Contains(err.Error(), "--listen "+addr) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("want an error naming --listen %s, got %v\n%s", addr, err, out)
	}
	if strings.Contains(out, "listening") {
		t.Errorf("logged a listener that is not there:\n%s", out)
	}
	// A relative --external-url would make relative links: refused before anything starts.
	for _, bad := range []string{"prflow.example.com", "/prflow", "ftp://prflow.example.com"} {
		_, err := runFor(t, 60*time.Second, "server", "--listen", freeAddr(t), "--tokens", tokens, "--data-dir", filepath.Join(dir, "nats"), "--external-url", bad)
		if err == nil || !strings.Contains(err.Error(), "--external-url") || !strings.Contains(err.Error(), bad) {
			t.Errorf("--external-url %s: want an error naming it, got %v", bad, err)
		}
	}
	// A worker opens its --listen (metrics, health) the same way, before joining NATS.
	if _, err := runFor(t, 60*time.Second, "worker", "--listen", addr, "--nats", "nats://"+holdPort(t)); err == nil ||
		!strings.Contains(err.Error(), "--listen "+addr) || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("worker: want an error naming --listen %s, got %v", addr, err)
	}
}

// TestServerWarnsWithoutExternalURL: commit statuses (always on in prflow server), PR comments
// and notifications link to runs only at --external-url, so a server without it says so at
// start, in one line naming the flag; with it, nothing is said.
func TestServerWarnsWithoutExternalURL(t *testing.T) {
	dir := t.TempDir()
	tokens := tokensFile(t, dir, "a", "PRFLOW_TEST_LISTEN_TOKEN", "listen-token-0123456789")
	for i, ext := range []string{"", "https://prflow.example"} {
		args := []string{"server", "--listen", freeAddr(t), "--log-level", "warn", "--tokens", tokens, "--data-dir", filepath.Join(dir, "nats", string(rune('a'+i)))}
		if ext != "" {
			args = append(args, "--external-url", ext)
		}
		ctx, cancel := context.WithCancel(context.Background())
		out, done := goCmd(ctx, args...)
		ready := waitReady(t, args[2])
		cancel()
		if err := <-done; err != nil || !ready {
			t.Fatalf("server %v: ready %v, exit %v\n%s", args, ready, err, out.String())
		}
		var warns []string
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, "--external-url") {
				warns = append(warns, l)
			}
		}
		if ext == "" && (len(warns) != 1 || !strings.Contains(warns[0], "level=WARN")) {
			t.Errorf("without --external-url: want one warning naming the flag, got %q\n%s", warns, out.String())
		}
		if ext != "" && len(warns) != 0 {
			t.Errorf("with --external-url: unexpected warning %q", warns)
		}
	}
}

// waitReady waits (generously: the machine is loaded) until addr answers /readyz.
func waitReady(t *testing.T, addr string) bool {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(25 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
	}
	return false
}
