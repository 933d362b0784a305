package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/scm/connector"
)

type client struct {
	base  string
	token string
	from  string // where the token came from (--token or PRFLOW_TOKEN), for the 401 hint
	http  *http.Client
}

func (g *globals) client() (*client, error) {
	tok, from := g.token, "--token"
	if tok == "" {
		tok, from = os.Getenv("PRFLOW_TOKEN"), "PRFLOW_TOKEN"
	}
	if tok != "" {
		// The same env:NAME / file:PATH syntax as the server's files (connector.ResolveCLISecret).
		s, err := connector.ResolveCLISecret(tok)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
		tok = s.Value()
	} else {
		// No --token nor PRFLOW_TOKEN: the sign-in of `prflow login`, if it was to this server.
		t, ok, err := storedToken(context.Background(), strings.TrimRight(g.server, "/"))
		if err != nil {
			return nil, err
		}
		if ok {
			tok, from = t, "prflow login"
		}
	}
	return &client{base: strings.TrimRight(g.server, "/"), token: tok, from: from, http: &http.Client{Timeout: 0}}, nil
}

func (c *client) do(ctx context.Context, method, path string, body, out any) error {
	_, err := c.doHeader(ctx, method, path, nil, body, out)
	return err
}

// doHeader is do with extra request headers; it returns the answer's headers.
func (c *client) doHeader(ctx context.Context, method, path string, hdr http.Header, body, out any) (http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, unreachable(c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, unreachable(c.base, fmt.Errorf("reading the answer to %s %s: %w", method, path, err))
	}
	if resp.StatusCode >= 300 {
		return resp.Header, c.authHint(apiErr(method, path, resp.StatusCode, data))
	}
	if out != nil {
		return resp.Header, json.Unmarshal(data, out)
	}
	return resp.Header, nil
}

// startGiveUp bounds how long `prflow run` keeps retrying a start the server did not answer.
var startGiveUp = 2 * time.Minute

// startRun starts a run with an Idempotency-Key and retries with the same key while the
// server is unreachable or the connection breaks (EOF, refused, reset) or it answers that it
// is unavailable: the server starts at most one run per key, so a retry after an answer that
// got lost returns the run the first attempt started (replayed true) instead of a second run.
func startRun(ctx context.Context, c *client, key string, req controller.StartRequest, errw io.Writer) (run *pipelines.Run, replayed bool, err error) {
	hdr := http.Header{controller.IdempotencyHeader: {key}}
	backoff := 250 * time.Millisecond
	var first time.Time
	for {
		run = &pipelines.Run{}
		h, err := c.doHeader(ctx, "POST", "/api/v1/runs", hdr, req, run)
		if err == nil {
			return run, h.Get(controller.ReplayedHeader) == "true", nil
		}
		if !retryable(err) || ctx.Err() != nil {
			return nil, false, err
		}
		if first.IsZero() {
			first = time.Now()
		} else if time.Since(first) > startGiveUp {
			return nil, false, fmt.Errorf("gave up starting the run after %s (idempotency key %s; run again with --idempotency-key %s to get the run if it started): %w",
				startGiveUp, key, key, err)
		}
		fmt.Fprintf(errw, "starting the run: %v; retrying with the same idempotency key\n", err)
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// newIdempotencyKey is a random key for one `prflow run`.
func newIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "prflow-run-" + hex.EncodeToString(b[:])
}

// httpError is an error answer of the API: the status and the server's message.
type httpError struct {
	Method, Path string
	Status       int
	Msg          string
}

func (e *httpError) Error() string { return e.Method + " " + e.Path + ": " + e.Msg }

// apiErr turns an error answer into an httpError with the server's message (and details),
// never its raw JSON or an HTML error page.
func apiErr(method, path string, status int, data []byte) error {
	var e struct {
		Error  string   `json:"error"`
		Detail []string `json:"detail"`
	}
	msg := fmt.Sprintf("HTTP %d %s", status, http.StatusText(status))
	if json.Unmarshal(data, &e) == nil && e.Error != "" {
		msg = e.Error
		if len(e.Detail) > 0 {
			msg += ":\n  " + strings.Join(e.Detail, "\n  ")
		}
	} else if line := firstLine(data); line != "" && !json.Valid(data) && !strings.HasPrefix(line, "<") {
		msg += ": " + line // a plain-text answer (a proxy, http.Error)
	}
	return &httpError{Method: method, Path: path, Status: status, Msg: msg}
}

// firstLine is the first line of a plain-text body, cut to a readable length.
func firstLine(b []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if len(line) > 200 {
		line = line[:197] + "..."
	}
	return strings.TrimSpace(line)
}

// authHint adds what to do about a refused token.
func (c *client) authHint(err error) error {
	var he *httpError
	if !errors.As(err, &he) || he.Status != http.StatusUnauthorized {
		return err
	}
	if c.token == "" {
		he.Msg += " (no token given: set --token or PRFLOW_TOKEN; both take a value, env:NAME or file:PATH; or run prflow login)"
	} else if c.from == "prflow login" {
		he.Msg += " (the sign-in of prflow login was refused: run prflow login again)"
	} else {
		he.Msg += fmt.Sprintf(" (the server does not know the token from %s; check --token or PRFLOW_TOKEN, which take a value, env:NAME or file:PATH)", c.from)
	}
	return he
}

func unreachable(base string, err error) error {
	return fmt.Errorf("prflow server %s: %w (is `prflow server` running? set --server or PRFLOW_SERVER)", base, err)
}

// retryable reports whether a request may succeed later: the server was unreachable or
// answered that it is unavailable (a restart, a proxy in front of it).
func retryable(err error) bool {
	var he *httpError
	if errors.As(err, &he) {
		return he.Status == http.StatusBadGateway || he.Status == http.StatusServiceUnavailable || he.Status == http.StatusGatewayTimeout
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

func parseSets(sets []string) (map[string]any, error) {
	out := map[string]any{}
	for _, s := range sets {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--set %q: want key=value", s)
		}
		out[k] = v
	}
	return out, nil
}

func newRun(g *globals) *cobra.Command {
	var sets []string
	var follow bool
	var key string
	var hf harnessFlags
	cmd := &cobra.Command{
		Use:   "run FILE",
		Short: "Start a run of a pipeline file on the server",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			inputs, err := parseSets(sets)
			if err != nil {
				return err
			}
			if hf.mapFile != "" { // convert here; without a map the server converts (or refuses)
				if src, err = hf.convert(args[0], src, inputs, false, cmd.ErrOrStderr()); err != nil {
					return err
				}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if key == "" {
				key = newIdempotencyKey()
			} else if err := controller.CheckIdempotencyKey(key); err != nil {
				return fmt.Errorf("--idempotency-key: %w", err)
			}
			req := controller.StartRequest{File: filepath.Base(args[0]), Source: src, Inputs: inputs}
			run, replayed, err := startRun(cmd.Context(), c, key, req, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if replayed {
				fmt.Fprintf(cmd.OutOrStdout(), "run %s already started by an earlier request with idempotency key %s (%s)\n", run.ID, key, run.Status)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "run %s started\n", run.ID)
			}
			if !follow {
				return nil
			}
			return followRun(cmd.Context(), c, run.ID, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringArrayVar(&sets, "set", nil, "runtime input key=value (repeatable)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "print progress until the run ends; exit non-zero unless it succeeds")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "start at most one run for this key (default: a new key per invocation); the same key again returns that run")
	hf.add(cmd)
	return cmd
}

// followGiveUp bounds how long `run -f` keeps retrying an unreachable server.
var followGiveUp = 10 * time.Minute

// followRun prints a run's progress until it ends and returns its outcome. It rides out a
// server restart: while the server is unreachable it retries with backoff, saying so on
// errw, for up to followGiveUp.
func followRun(ctx context.Context, c *client, id string, w, errw io.Writer) error {
	pr := newProgress(w)
	var down time.Time
	backoff := 250 * time.Millisecond
	for {
		var run pipelines.Run
		err := c.do(ctx, "GET", "/api/v1/runs/"+id, nil, &run)
		if err != nil {
			if !retryable(err) || ctx.Err() != nil {
				return err
			}
			if down.IsZero() {
				down = time.Now()
				fmt.Fprintf(errw, "lost the server while following run %s (%v); retrying\n", id, err)
			} else if time.Since(down) > followGiveUp {
				return fmt.Errorf("gave up following run %s after %s without the server (the run may still be going; see `prflow status %s`): %w",
					id, followGiveUp, id, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		if !down.IsZero() {
			fmt.Fprintf(errw, "server back after %s; following run %s again\n", time.Since(down).Round(time.Second), id)
			down, backoff = time.Time{}, 250*time.Millisecond
		}
		pr.update(&run)
		if run.Status.Terminal() {
			return runOutcome(&run)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func runOutcome(r *pipelines.Run) error {
	if r.Status == pipelines.StSucceeded {
		return nil
	}
	return exitError{code: 2, msg: fmt.Sprintf("run %s %s: %s", r.ID, r.Status, r.Error)}
}

func stepDetail(st *pipelines.StepRun) string {
	switch {
	case st.Error != "":
		return st.Error
	case st.Status == pipelines.StWaiting && st.Wait != nil:
		return st.Wait.Reason
	case st.Status == pipelines.StQueued && st.Wait != nil && strings.HasPrefix(st.Wait.Reason, controller.NoWorker):
		return st.Wait.Reason // the server found no live worker that can take it
	case len(st.Outputs) > 0:
		keys := make([]string, 0, len(st.Outputs))
		for k := range st.Outputs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s=%v", k, st.Outputs[k]))
		}
		s := strings.Join(parts, " ")
		if len(s) > 100 {
			s = s[:97] + "..."
		}
		return s
	}
	return ""
}

func newCancel(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel RUN",
		Short: "Cancel a run and its parked steps",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.do(cmd.Context(), "POST", "/api/v1/runs/"+args[0]+"/cancel", struct{}{}, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s cancelling\n", args[0])
			return nil
		},
	}
}

func newApprove(g *globals) *cobra.Command {
	var reject bool
	var comment string
	cmd := &cobra.Command{
		Use:   "approve RUN STAGE.STEP",
		Short: "Approve (or --reject) a step waiting for approval",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			stage, step, ok := strings.Cut(args[1], ".")
			if !ok {
				return errors.New("step: want STAGE.STEP")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			req := controller.SignalRequest{Stage: stage, Step: step, Approve: !reject, Comment: comment}
			if err := c.do(cmd.Context(), "POST", "/api/v1/runs/"+args[0]+"/signals", req, nil); err != nil {
				return err
			}
			verb := "approval"
			if reject {
				verb = "rejection"
			}
			// The server accepted the decision from an allowed approver of a step that waits for
			// one; the step counts it when it looks again.
			fmt.Fprintf(cmd.OutOrStdout(), "%s of %s in run %s recorded\n", verb, args[1], args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&reject, "reject", false, "reject instead of approve")
	cmd.Flags().StringVar(&comment, "comment", "", "comment recorded with the decision")
	return cmd
}
