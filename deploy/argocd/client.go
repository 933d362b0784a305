package argocd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prflow/prflow/deploy/agent"
)

// Client is a small client of Argo CD's REST API (v2.x/v3.x): the calls the agent needs, with
// errors turned into agent error codes. It never puts the token into an error or log.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client // unary calls; each bounded by Timeout
	sc    *http.Client // watch streams; bounded by IdleTimeout instead
	// Timeout bounds one unary call (default 30s).
	Timeout time.Duration
	// IdleTimeout ends a watch stream that sent nothing (not even a keepalive) this long
	// (default 60s; Argo CD sends a keepalive every 15s on SSE streams).
	IdleTimeout time.Duration
}

// ClientOptions configure NewClient.
type ClientOptions struct {
	URL      string
	Token    string
	CAFile   string // PEM bundle to trust in addition to the system roots
	Insecure bool   // skip TLS verification (test setups only)
	// Transport replaces the HTTP transport (tests); CAFile and Insecure are then ignored.
	Transport http.RoundTripper
}

// NewClient checks the options and builds a client; it does not contact Argo CD.
func NewClient(o ClientOptions) (*Client, error) {
	if o.URL == "" {
		return nil, errors.New("argocd: URL is required (--argocd-url)")
	}
	u, err := url.Parse(strings.TrimRight(o.URL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("argocd: URL %q: want http(s)://host[:port][/path]", agent.RedactURL(o.URL))
	}
	if u.User != nil {
		return nil, fmt.Errorf("argocd: URL %s must not carry credentials; use --argocd-token-file", agent.RedactURL(o.URL))
	}
	if strings.TrimSpace(o.Token) == "" {
		return nil, errors.New("argocd: token is empty (--argocd-token-file must hold an Argo CD API token)")
	}
	rt := o.Transport
	if rt == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 32
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if o.CAFile != "" {
			pem, err := os.ReadFile(o.CAFile)
			if err != nil {
				return nil, fmt.Errorf("argocd: CA file: %w", err)
			}
			pool, err := x509.SystemCertPool()
			if err != nil || pool == nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("argocd: CA file %s: no PEM certificates found", o.CAFile)
			}
			tc.RootCAs = pool
		}
		tc.InsecureSkipVerify = o.Insecure //nolint:gosec // explicit --argocd-insecure
		tr.TLSClientConfig = tc
		rt = tr
	}
	return &Client{base: u, token: strings.TrimSpace(o.Token), hc: &http.Client{Transport: rt}, sc: &http.Client{Transport: rt},
		Timeout: 30 * time.Second, IdleTimeout: 60 * time.Second}, nil
}

// URL is Argo CD's base URL.
func (c *Client) URL() string { return c.base.String() }

// ---- the subset of Argo CD's JSON the agent reads ----

// Application is the part of v1alpha1.Application the agent reads.
type Application struct {
	Metadata struct {
		Name              string            `json:"name"`
		Namespace         string            `json:"namespace"`
		UID               string            `json:"uid"`
		ResourceVersion   string            `json:"resourceVersion"`
		Labels            map[string]string `json:"labels"`
		CreationTimestamp *time.Time        `json:"creationTimestamp"`
		DeletionTimestamp *time.Time        `json:"deletionTimestamp"`
		OwnerReferences   []struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Spec struct {
		Project     string   `json:"project"`
		Source      *Source  `json:"source"`
		Sources     []Source `json:"sources"`
		Destination struct {
			Server    string `json:"server"`
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"destination"`
		SyncPolicy *struct {
			Automated *struct {
				Enabled *bool `json:"enabled"`
			} `json:"automated"`
			SyncOptions []string `json:"syncOptions"`
		} `json:"syncPolicy"`
	} `json:"spec"`
	Status struct {
		Sync struct {
			Status    string   `json:"status"`
			Revision  string   `json:"revision"`
			Revisions []string `json:"revisions"`
		} `json:"sync"`
		Health struct {
			Status             string     `json:"status"`
			Message            string     `json:"message"`
			LastTransitionTime *time.Time `json:"lastTransitionTime"`
		} `json:"health"`
		OperationState *struct {
			Operation  Operation  `json:"operation"`
			Phase      string     `json:"phase"`
			Message    string     `json:"message"`
			StartedAt  *time.Time `json:"startedAt"`
			FinishedAt *time.Time `json:"finishedAt"`
			RetryCount int64      `json:"retryCount"`
			SyncResult *struct {
				Revision  string   `json:"revision"`
				Revisions []string `json:"revisions"`
			} `json:"syncResult"`
		} `json:"operationState"`
		History []struct {
			Revision  string   `json:"revision"`
			Revisions []string `json:"revisions"`
		} `json:"history"`
		Conditions []struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"conditions"`
		Resources []struct {
			Group           string `json:"group"`
			Kind            string `json:"kind"`
			Namespace       string `json:"namespace"`
			Name            string `json:"name"`
			Status          string `json:"status"`
			RequiresPruning bool   `json:"requiresPruning"`
			Health          *struct {
				Status  string `json:"status"`
				Message string `json:"message"`
			} `json:"health"`
		} `json:"resources"`
		ControllerNamespace string `json:"controllerNamespace"`
	} `json:"status"`
	Operation *Operation `json:"operation"`
}

// Source is v1alpha1.ApplicationSource (the fields the agent reports).
type Source struct {
	RepoURL        string `json:"repoURL"`
	Path           string `json:"path"`
	TargetRevision string `json:"targetRevision"`
	Chart          string `json:"chart"`
}

// Operation is v1alpha1.Operation (the fields the agent reads).
type Operation struct {
	Sync *struct {
		Revision  string   `json:"revision"`
		Revisions []string `json:"revisions"`
		DryRun    bool     `json:"dryRun"`
	} `json:"sync"`
	InitiatedBy struct {
		Username  string `json:"username"`
		Automated bool   `json:"automated"`
	} `json:"initiatedBy"`
	Info []Info `json:"info"`
}

// Info is v1alpha1.Info.
type Info struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type appList struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Items []Application `json:"items"`
}

// SyncBody is ApplicationSyncRequest, the body of POST /api/v1/applications/{name}/sync.
type SyncBody struct {
	Name          string         `json:"name"`
	Revision      string         `json:"revision,omitempty"`
	DryRun        bool           `json:"dryRun,omitempty"`
	Prune         bool           `json:"prune,omitempty"`
	Strategy      *SyncStrategy  `json:"strategy,omitempty"`
	RetryStrategy *RetryStrategy `json:"retryStrategy,omitempty"`
	SyncOptions   *SyncOptions   `json:"syncOptions,omitempty"`
	Infos         []Info         `json:"infos,omitempty"`
	AppNamespace  string         `json:"appNamespace,omitempty"`
}

// SyncStrategy is v1alpha1.SyncStrategy; the hook strategy's force is inlined on the wire.
type SyncStrategy struct {
	Apply *Force `json:"apply,omitempty"`
	Hook  *Force `json:"hook,omitempty"`
}

// Force is {"force": bool}.
type Force struct {
	Force bool `json:"force"`
}

// RetryStrategy is v1alpha1.RetryStrategy.
type RetryStrategy struct {
	Limit   int64 `json:"limit"`
	Backoff *struct {
		Duration    string `json:"duration,omitempty"`
		Factor      *int64 `json:"factor,omitempty"`
		MaxDuration string `json:"maxDuration,omitempty"`
	} `json:"backoff,omitempty"`
}

// SyncOptions is applicationSyncOptions.
type SyncOptions struct {
	Items []string `json:"items"`
}

// ---- calls ----

// List returns the apps matching selector (a Kubernetes label selector, "" for all) and the
// list's resourceVersion.
func (c *Client) List(ctx context.Context, selector string) ([]Application, string, error) {
	q := url.Values{}
	if selector != "" {
		q.Set("selector", selector)
	}
	var l appList
	if err := c.do(ctx, http.MethodGet, "/api/v1/applications", q, nil, &l, ""); err != nil {
		return nil, "", err
	}
	return l.Items, l.Metadata.ResourceVersion, nil
}

// Ping checks that Argo CD answers and accepts the token, with the cheapest authenticated call.
func (c *Client) Ping(ctx context.Context) error {
	q := url.Values{"fields": {"metadata.resourceVersion"}}
	var l appList
	return c.do(ctx, http.MethodGet, "/api/v1/applications", q, nil, &l, "")
}

// Get reads one app; refresh "normal" or "hard" makes Argo CD re-read git first.
func (c *Client) Get(ctx context.Context, name, appNamespace string, refresh agent.Refresh) (*Application, error) {
	q := url.Values{}
	if refresh != "" {
		q.Set("refresh", string(refresh))
	}
	var a Application
	if err := c.getApp(ctx, name, appNamespace, "", q, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// getApp reads GET /api/v1/applications/{name}{sub} (sub "" for the app itself) with query q
// (may be nil) and the app's namespace into out.
func (c *Client) getApp(ctx context.Context, name, appNamespace, sub string, q url.Values, out any) error {
	if appNamespace != "" {
		if q == nil {
			q = url.Values{}
		}
		q.Set("appNamespace", appNamespace)
	}
	return c.do(ctx, http.MethodGet, "/api/v1/applications/"+url.PathEscape(name)+sub, q, nil, out, name)
}

// Sync starts a sync operation and returns the app as Argo CD answered (with the operation).
func (c *Client) Sync(ctx context.Context, body SyncBody) (*Application, error) {
	var a Application
	if err := c.do(ctx, http.MethodPost, "/api/v1/applications/"+url.PathEscape(body.Name)+"/sync", nil, body, &a, body.Name); err != nil {
		return nil, err
	}
	return &a, nil
}

// AppSyncWindows is applicationApplicationSyncWindowsResponse: the windows of the app's
// project that match the app (Argo CD does the matching), which are active, and whether a
// manual sync may run now.
type AppSyncWindows struct {
	ActiveWindows   []AppSyncWindow `json:"activeWindows"`
	AssignedWindows []AppSyncWindow `json:"assignedWindows"`
	CanSync         *bool           `json:"canSync"`
}

// AppSyncWindow is applicationApplicationSyncWindow (it carries no time zone).
type AppSyncWindow struct {
	Kind       string `json:"kind"`
	Schedule   string `json:"schedule"`
	Duration   string `json:"duration"`
	ManualSync bool   `json:"manualSync"`
}

// Project is the part of v1alpha1AppProject the agent reads.
type Project struct {
	Metadata struct {
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Spec struct {
		SyncWindows []struct {
			Kind       string `json:"kind"`
			Schedule   string `json:"schedule"`
			Duration   string `json:"duration"`
			ManualSync bool   `json:"manualSync"`
			TimeZone   string `json:"timeZone"`
		} `json:"syncWindows"`
	} `json:"spec"`
}

// SyncWindows reads the sync windows assigned to an app (GET
// /api/v1/applications/{name}/syncwindows).
func (c *Client) SyncWindows(ctx context.Context, name, appNamespace string) (*AppSyncWindows, error) {
	var w AppSyncWindows
	if err := c.getApp(ctx, name, appNamespace, "/syncwindows", nil, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// Project reads an AppProject (GET /api/v1/projects/{name}); the agent needs it for the time
// zones of its sync windows, which the app's syncwindows answer leaves out.
func (c *Client) Project(ctx context.Context, name string) (*Project, error) {
	var p Project
	if err := c.do(ctx, http.MethodGet, "/api/v1/projects/"+url.PathEscape(name), nil, nil, &p, ""); err != nil {
		return nil, err
	}
	return &p, nil
}

// errorBody is grpc-gateway's error shape.
type errorBody struct {
	Error   string `json:"error"`
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// gRPC codes Argo CD puts into its error bodies (grpc-gateway's "code").
const (
	grpcDeadlineExceeded = 4
	grpcUnavailable      = 14
)

// Unavailable reports whether an Argo CD error answer (HTTP status, the gRPC code of its body,
// its message) means Argo CD cannot work right now — its repo-server or redis is down or slow,
// or Argo CD itself answered with a 5xx of its own — so the request may succeed unchanged
// later. This is the one place such answers are classified (agent.CodeUnavailable); a proxy
// in front of Argo CD answering 502/503/504 without Argo CD's error body is CodeUnreachable.
func Unavailable(status, grpcCode int, msg string) bool {
	if grpcCode == grpcUnavailable || grpcCode == grpcDeadlineExceeded {
		return true
	}
	if agent.UnavailableText(msg) {
		return true
	}
	// A 5xx in Argo CD's own error shape (gRPC Internal or Unknown) is a failure inside Argo
	// CD, not a verdict on the request.
	return status >= 500 && grpcCode != 0 && status != http.StatusNotImplemented
}

// do sends one request. app is set for calls on one application (a 403 then means "not found").
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any, app string) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return &agent.Error{Code: agent.CodeInvalid, App: app, Message: err.Error()}
		}
		rd = bytes.NewReader(b)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(rctx, method, u.String(), rd)
	if err != nil {
		return &agent.Error{Code: agent.CodeInvalid, App: app, Message: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if method != http.MethodGet {
		// Argo CD refuses any non-GET request without exactly this header (415).
		req.Header.Set("Content-Type", "application/json")
	}
	call := method + " " + path
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.transportError(ctx, rctx, call, timeout, app, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return c.transportError(ctx, rctx, call, timeout, app, err)
	}
	if resp.StatusCode/100 != 2 {
		return c.statusError(resp.StatusCode, data, call, app)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return &agent.Error{Code: agent.CodeInternal, App: app, Message: fmt.Sprintf("Argo CD %s: %s answered undecodable JSON: %v", c.base, call, err)}
		}
	}
	return nil
}

func (c *Client) transportError(ctx, rctx context.Context, call string, timeout time.Duration, app string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if rctx.Err() != nil {
		return &agent.Error{Code: agent.CodeTimeout, App: app, Message: fmt.Sprintf("Argo CD at %s did not answer %s within %s", c.base, call, timeout)}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // url.Error repeats the URL; say it once
	}
	return &agent.Error{Code: agent.CodeUnreachable, App: app, Message: fmt.Sprintf("Argo CD at %s is unreachable (%s): %v", c.base, call, err)}
}

func (c *Client) statusError(status int, data []byte, call, app string) error {
	var eb errorBody
	msg := strings.TrimSpace(string(data))
	if json.Unmarshal(data, &eb) == nil && (eb.Message != "" || eb.Error != "") {
		msg = eb.Message
		if msg == "" {
			msg = eb.Error
		}
	}
	if len(msg) > 500 {
		msg = msg[:500] + "…"
	}
	where := fmt.Sprintf("Argo CD at %s: %s: HTTP %d", c.base, call, status)
	switch {
	case strings.Contains(msg, "blocked by sync window") || strings.Contains(msg, "invalid sync window"):
		// "cannot sync: blocked by sync window" (PermissionDenied: a 403 that is no
		// "not found").
		return &agent.Error{Code: agent.CodeSyncWindow, App: app, Message: where + ": " + msg}
	case status == http.StatusUnauthorized:
		return &agent.Error{Code: agent.CodeUnauthorized, App: app, Message: where + ": the agent's token was rejected (" + msg + "); check --argocd-token-file"}
	case status == http.StatusForbidden && app != "":
		// Argo CD answers 403 for an app that does not exist, so as not to reveal it.
		return &agent.Error{Code: agent.CodeNotFound, App: app, Message: where + ": application not found, or the agent's token may not access it (" + msg + ")"}
	case status == http.StatusForbidden:
		return &agent.Error{Code: agent.CodeUnauthorized, App: app, Message: where + ": the agent's token lacks permission (" + msg + ")"}
	case status == http.StatusNotFound:
		return &agent.Error{Code: agent.CodeNotFound, App: app, Message: where + ": " + msg}
	case strings.Contains(msg, "another operation is already in progress"):
		return &agent.Error{Code: agent.CodeOperationInProgress, App: app, Message: where + ": " + msg}
	case strings.Contains(msg, "error parsing") && strings.Contains(msg, "selector"):
		// A 500 on Argo CD, but the caller's mistake.
		return &agent.Error{Code: agent.CodeInvalid, App: app, Message: where + ": " + msg}
	case Unavailable(status, eb.Code, msg):
		if !Unavailable(0, eb.Code, msg) {
			// Only a 5xx: say what Argo CD said, no more (a conflict inside Argo CD is a 500 too).
			return &agent.Error{Code: agent.CodeUnavailable, App: app, Message: where + ": " + msg}
		}
		return &agent.Error{Code: agent.CodeUnavailable, App: app, Message: where + ": Argo CD cannot work right now: " + msg}
	case status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout:
		return &agent.Error{Code: agent.CodeUnreachable, App: app, Message: where + ": " + msg}
	case status >= 500:
		return &agent.Error{Code: agent.CodeInternal, App: app, Message: where + ": " + msg}
	}
	return &agent.Error{Code: agent.CodeRejected, App: app, Message: where + ": " + msg}
}

// ---- watch ----

// WatchEvent is one message of the application watch stream.
type WatchEvent struct {
	Type        string      `json:"type"` // ADDED, MODIFIED, DELETED
	Application Application `json:"application"`
}

// Watch opens GET /api/v1/stream/applications as server-sent events and calls fn for every
// event until the stream ends, fails, goes idle for IdleTimeout, or ctx ends. opened is called
// once the server accepted the stream (before the first event). Watch always returns an
// error; ctx.Err() when ctx ended.
func (c *Client) Watch(ctx context.Context, opened func(), fn func(WatchEvent)) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := c.IdleTimeout
	if idle <= 0 {
		idle = 60 * time.Second
	}
	var timedOut, answered atomic.Bool
	var openOnce sync.Once
	open := func() {
		if opened != nil {
			openOnce.Do(opened)
		}
	}
	// Argo CD answers a watch with nothing, not even headers, while it has no application
	// (v3.2.11, measured): an empty Argo CD is not a dead one. Before the headers come, the
	// stream is probed with a list: no apps means it is open and quiet; apps but no answer
	// for IdleTimeout means it is stuck.
	probe := min(idle, 3*time.Second)
	start := time.Now()
	var timer *time.Timer
	timer = time.AfterFunc(probe, func() {
		if !answered.Load() {
			if apps, _, err := c.List(sctx, ""); err == nil && len(apps) == 0 {
				open()
				timer.Reset(idle)
				return
			}
			if rest := idle - time.Since(start); rest > 0 && sctx.Err() == nil {
				timer.Reset(rest)
				return
			}
		}
		timedOut.Store(true)
		cancel()
	})
	defer timer.Stop()

	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + "/api/v1/stream/applications"
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "text/event-stream")
	const call = "GET /api/v1/stream/applications"
	resp, err := c.sc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if timedOut.Load() {
			return &agent.Error{Code: agent.CodeTimeout, Message: fmt.Sprintf("Argo CD at %s: %s: no answer within %s", c.base, call, idle)}
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return &agent.Error{Code: agent.CodeUnreachable, Message: fmt.Sprintf("Argo CD at %s is unreachable (%s): %v", c.base, call, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		data = bytes.TrimSpace(bytes.TrimPrefix(bytes.TrimSpace(data), []byte("data:")))
		var se struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(data, &se) == nil && se.Error.Message != "" {
			data, _ = json.Marshal(errorBody{Message: se.Error.Message})
		}
		return c.statusError(resp.StatusCode, data, call, "")
	}
	answered.Store(true)
	timer.Reset(idle)
	open()
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := readLine(r, 64<<20)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if timedOut.Load() {
				return &agent.Error{Code: agent.CodeTimeout, Message: fmt.Sprintf("Argo CD at %s: %s: nothing received for %s", c.base, call, idle)}
			}
			if errors.Is(err, io.EOF) {
				return &agent.Error{Code: agent.CodeUnreachable, Message: fmt.Sprintf("Argo CD at %s: %s: stream closed by the server", c.base, call)}
			}
			return &agent.Error{Code: agent.CodeUnreachable, Message: fmt.Sprintf("Argo CD at %s: %s: stream broken: %v", c.base, call, err)}
		}
		timer.Reset(idle)
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == ':' {
			continue // SSE separator or keepalive comment
		}
		if p, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			line = bytes.TrimSpace(p)
		}
		var msg struct {
			Result *WatchEvent `json:"result"`
			Error  *struct {
				Message  string `json:"message"`
				HTTPCode int    `json:"http_code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(line, &msg); err != nil {
			return &agent.Error{Code: agent.CodeInternal, Message: fmt.Sprintf("Argo CD at %s: %s: undecodable event: %v", c.base, call, err)}
		}
		if msg.Error != nil {
			data, _ := json.Marshal(errorBody{Message: msg.Error.Message})
			code := msg.Error.HTTPCode
			if code < 400 {
				code = http.StatusInternalServerError
			}
			// A 401 on an open stream (token revoked) must read as unauthorized, not as a
			// server error.
			return c.statusError(code, data, call, "")
		}
		if msg.Result != nil {
			fn(*msg.Result)
		}
	}
}

// readLine reads one '\n'-terminated line of at most limit bytes.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var buf []byte
	for {
		frag, err := r.ReadSlice('\n')
		buf = append(buf, frag...)
		if err == nil {
			return buf, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if len(buf) > 0 && errors.Is(err, io.EOF) {
				return buf, nil
			}
			return nil, err
		}
		if len(buf) > limit {
			return nil, fmt.Errorf("event longer than %d bytes", limit)
		}
	}
}
