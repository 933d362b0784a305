package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// slowClient opens a connection to addr, sends head at once and then trickles trickle one byte
// every 50 ms. It returns what the server answered (the first line, if any) and how long after
// head the server closed the connection.
func slowClient(t *testing.T, addr, head, trickle string) (status string, closedAfter time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := 0; i < len(trickle); i++ {
			if _, err := conn.Write([]byte{trickle[i]}); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Minute)) // only so that a failing test ends
	br := bufio.NewReader(conn)
	status, _ = br.ReadString('\n')
	_, _ = io.Copy(io.Discard, br) // until the server closes the connection
	return strings.TrimSpace(status), time.Since(start)
}

// TestServerSlowClients: prflow server closes a connection whose headers or body trickle in
// (slowloris) once --read-header-timeout or --read-body-timeout has passed, on the webhook
// endpoint and on the UI's sign-in form, while a server-sent event stream of the UI stays open
// far longer than both and still delivers.
func TestServerSlowClients(t *testing.T) {
	const headerTimeout, bodyTimeout = time.Second, 2 * time.Second
	// A loaded machine answers late: allow this much on top of a timeout, well under the
	// 2 minutes a trickle of one byte per 50 ms would take to send its body.
	const slack = 15 * time.Second
	dir := t.TempDir()
	tokens := tokensFile(t, dir, "cli", "PRFLOW_TEST_TOKEN", "slow-token-0123456789")
	t.Setenv("PRFLOW_TEST_HOOK_SECRET", "slow-hook-secret-0123456789")
	hooks := writeFile(t, dir, "hooks.yaml", "webhooks:\n  - provider: github\n    secret: env:PRFLOW_TEST_HOOK_SECRET\n")
	addr := startServer(t, "--tokens", tokens, "--webhooks", hooks, "--data-dir", filepath.Join(dir, "nats"),
		"--read-header-timeout", headerTimeout.String(), "--read-body-timeout", bodyTimeout.String())
	trickle := strings.Repeat("x", 2400) // 2 minutes at one byte per 50 ms

	t.Run("webhook body", func(t *testing.T) {
		head := "POST /hooks/github HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nX-GitHub-Event: push\r\n" +
			"X-Hub-Signature-256: sha256=" + strings.Repeat("ab", 32) + "\r\nContent-Length: 2400\r\n\r\n"
		status, after := slowClient(t, addr, head, trickle)
		if !strings.HasPrefix(status, "HTTP/1.1 408") {
			t.Errorf("answer %q, want 408 Request Timeout", status)
		}
		if after < bodyTimeout || after > bodyTimeout+slack {
			t.Errorf("connection closed after %v, want about the %v body timeout", after, bodyTimeout)
		}
	})
	t.Run("sign-in form body", func(t *testing.T) {
		head := "POST /ui/login HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 2400\r\n\r\n"
		status, after := slowClient(t, addr, head, "token="+trickle)
		if strings.HasPrefix(status, "HTTP/1.1 2") || strings.HasPrefix(status, "HTTP/1.1 3") {
			t.Errorf("answer %q to a body that never arrived", status)
		}
		if after < bodyTimeout || after > bodyTimeout+slack {
			t.Errorf("connection closed after %v, want about the %v body timeout", after, bodyTimeout)
		}
	})
	t.Run("headers", func(t *testing.T) {
		_, after := slowClient(t, addr, "POST /hooks/github HTTP/1.1\r\n", "Host: "+addr+"\r\nX-Pad: "+trickle)
		if after < headerTimeout || after > headerTimeout+slack {
			t.Errorf("connection closed after %v, want about the %v header timeout", after, headerTimeout)
		}
	})
	t.Run("a body sent in time", func(t *testing.T) {
		// The deadline is per request: a quick body on a kept-alive connection is answered
		// after an earlier request on it took most of the timeout to arrive.
		resp, err := http.Post("http://"+addr+"/hooks/github", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("unsigned quick webhook: HTTP %d, want 401", resp.StatusCode)
		}
	})

	t.Run("event stream outlives the timeouts", func(t *testing.T) {
		api := func(method, path string, body any) *http.Response {
			t.Helper()
			var rd io.Reader
			if body != nil {
				b, _ := json.Marshal(body)
				rd = bytes.NewReader(b)
			}
			req, _ := http.NewRequest(method, "http://"+addr+path, rd)
			req.Header.Set("Authorization", "Bearer slow-token-0123456789")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}
		// No worker runs: the run stays running until it is cancelled.
		resp := api("POST", "/api/v1/runs", map[string]any{"file": "p.yaml",
			"source": "name: waits\nstages: [{id: s, steps: [{id: a, type: Noop}]}]\n"})
		var run struct{ ID string }
		_ = json.NewDecoder(resp.Body).Decode(&run)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || run.ID == "" {
			t.Fatalf("start a run: HTTP %d", resp.StatusCode)
		}
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar}
		if resp, err := c.PostForm("http://"+addr+"/ui/login", url.Values{"token": {"slow-token-0123456789"}, "next": {"/ui/"}}); err != nil {
			t.Fatal(err)
		} else {
			resp.Body.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/ui/runs/"+run.ID+"/events", nil)
		req.Header.Set("Accept", "text/event-stream")
		sresp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer sresp.Body.Close()
		if sresp.StatusCode != http.StatusOK || sresp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("event stream: HTTP %d %s", sresp.StatusCode, sresp.Header.Get("Content-Type"))
		}
		events := make(chan string, 64)
		go func() {
			defer close(events)
			sc := bufio.NewScanner(sresp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				if e, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
					events <- e
				}
			}
		}()
		if e := <-events; e != "run" {
			t.Fatalf("first event %q", e)
		}
		time.Sleep(headerTimeout + bodyTimeout + time.Second)
		resp = api("POST", "/api/v1/runs/"+run.ID+"/cancel", map[string]any{})
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("cancel: HTTP %d", resp.StatusCode)
		}
		got := false
		for e := range events {
			if e == "run" || e == "end" {
				got = true
				break
			}
		}
		if !got {
			t.Errorf("the event stream ended without the cancelled run: closed by a timeout? (%v)", ctx.Err())
		}
	})
}
