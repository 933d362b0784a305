package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// vmRSS is this process's resident set size in bytes (/proc/self/status VmRSS).
func vmRSS(tb testing.TB) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		tb.Fatalf("read RSS: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				tb.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	tb.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// floodPush is a valid GitHub push just under 25 MiB: many commits with long messages, few
// changed paths, so the normalised event stays small and the cost measured is the body's.
func floodPush(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"ref":"refs/heads/main","before":"` + strings.Repeat("1", 40) + `","after":"` + strings.Repeat("2", 40) +
		`","repository":{"full_name":"acme/web","name":"web","owner":{"login":"acme"}},"sender":{"login":"jdoe"},"commits":[`)
	msg := strings.Repeat("x", 1000)
	for i := 0; b.Len() < size-2200; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"%040x","message":"%s","added":[],"modified":["a.txt"],"removed":[]}`, i+1, msg)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// startFloodServer runs `prflow server` in this process with a GitHub webhook secret and
// returns its address once it is ready.
func startFloodServer(b *testing.B, secret string) string {
	b.Helper()
	dir := b.TempDir()
	b.Setenv("PRFLOW_BENCH_TOKEN", "bench-token-0123456789")
	b.Setenv("PRFLOW_BENCH_HOOK_SECRET", secret)
	tokens := filepath.Join(dir, "tokens.yaml")
	hooks := filepath.Join(dir, "hooks.yaml")
	if err := os.WriteFile(tokens, []byte("tokens:\n  - user: cli\n    token: env:PRFLOW_BENCH_TOKEN\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(hooks, []byte("webhooks:\n  - provider: github\n    secret: env:PRFLOW_BENCH_HOOK_SECRET\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		root := newRoot()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs([]string{"server", "--listen", addr, "--log-level", "error", "--tokens", tokens, "--webhooks", hooks,
			"--data-dir", filepath.Join(dir, "nats")})
		done <- root.ExecuteContext(ctx)
	}()
	b.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			b.Error("server did not stop")
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		if time.Now().After(deadline) {
			b.Fatal("server not ready after 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// BenchmarkWebhookFlood posts 64 concurrent 25 MiB bodies to /hooks/github of a real server
// over loopback and reports the peak RSS above idle: without a signature header, with a
// wrong signature, and correctly signed. All bodies share one byte slice, so the client adds
// nothing per request; what grows is the server.
//
//	go test -run '^$' -bench BenchmarkWebhookFlood -benchtime 1x ./cmd/prflow
func BenchmarkWebhookFlood(b *testing.B) {
	const secret = "bench-hook-secret-0123456789"
	const concurrent = 64
	body := floodPush(25 << 20)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	goodSig := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	badSig := "sha256=" + strings.Repeat("ab", 32)
	addr := startFloodServer(b, secret)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: concurrent, DisableKeepAlives: true}}

	for _, tc := range []struct{ name, sig string }{{"unsigned", ""}, {"badsig", badSig}, {"signed", goodSig}} {
		b.Run(tc.name, func(b *testing.B) {
			runtime.GC()
			debug.FreeOSMemory()
			idle := vmRSS(b)
			var peak atomic.Int64
			stop := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				t := time.NewTicker(5 * time.Millisecond)
				defer t.Stop()
				for {
					if r := vmRSS(b); r > peak.Load() {
						peak.Store(r)
					}
					select {
					case <-stop:
						return
					case <-t.C:
					}
				}
			}()
			var mu sync.Mutex
			codes := map[string]int{}
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				var wg sync.WaitGroup
				for i := range concurrent {
					wg.Add(1)
					go func() {
						defer wg.Done()
						req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/hooks/github", bytes.NewReader(body))
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("X-GitHub-Event", "push")
						req.Header.Set("X-GitHub-Delivery", fmt.Sprintf("flood-%s-%d-%d", tc.name, n, i))
						if tc.sig != "" {
							req.Header.Set("X-Hub-Signature-256", tc.sig)
						}
						code := "error"
						if resp, err := client.Do(req); err == nil {
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							code = strconv.Itoa(resp.StatusCode)
						}
						mu.Lock()
						codes[code]++
						mu.Unlock()
					}()
				}
				wg.Wait()
			}
			b.StopTimer()
			close(stop)
			<-sampled
			b.ReportMetric(float64(peak.Load()-idle)/(1<<20), "rss-MB-above-idle")
			b.ReportMetric(float64(idle)/(1<<20), "idle-rss-MB")
			for _, c := range []string{"202", "401", "503", "error"} {
				b.ReportMetric(float64(codes[c])/float64(b.N), "http-"+c+"/op")
			}
			b.Logf("%s: idle RSS %d MB, peak %d MB, answers %v", tc.name, idle>>20, peak.Load()>>20, codes)
		})
	}
}
