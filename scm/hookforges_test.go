package scm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/bitbucket"
	"github.com/prflow/prflow/scm/github"
	"github.com/prflow/prflow/scm/gitlab"
	"github.com/prflow/prflow/scm/scmtest"
)

// bodyCounter counts the body bytes a parser read and notes whether a spill file existed
// while it was reading.
type bodyCounter struct {
	r        io.ReadCloser
	n        atomic.Int64
	dir      string
	sawSpill bool
}

func (c *bodyCounter) Read(p []byte) (int, error) {
	if m, _ := filepath.Glob(filepath.Join(c.dir, "prflow-webhook-*")); len(m) > 0 {
		c.sawSpill = true
	}
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *bodyCounter) Close() error { return c.r.Close() }

type forgeCase struct {
	name    string
	sigHdr  string
	token   bool // the header is a token checked before the body (GitLab)
	request func(ctx context.Context, url, secret string, ev scmtest.WebhookEvent) (*http.Request, error)
	parser  func(s scm.WebhookSettings) scm.WebhookParser
}

var forgeCases = []forgeCase{
	{name: "github", sigHdr: "X-Hub-Signature-256", request: scmtest.GitHubWebhookRequest,
		parser: func(s scm.WebhookSettings) scm.WebhookParser { p := github.WebhookParser(s); return &p }},
	{name: "gitlab", sigHdr: "X-Gitlab-Token", token: true, request: scmtest.GitLabWebhookRequest,
		parser: func(s scm.WebhookSettings) scm.WebhookParser { p := gitlab.WebhookParser(s); return &p }},
	{name: "bitbucket", sigHdr: "X-Hub-Signature", request: scmtest.BitbucketWebhookRequest,
		parser: func(s scm.WebhookSettings) scm.WebhookParser { p := bitbucket.WebhookParser(s); return &p }},
}

// largePush is a push whose payload is far past the 4 KiB in-memory part the tests allow,
// also where a forge lists only its newest commits (Bitbucket 5, GitLab 20).
func largePush() scmtest.PushEvent {
	ev := scmtest.PushEvent{Owner: "acme", Name: "web", Ref: "refs/heads/main", Before: strings.Repeat("1", 40), After: strings.Repeat("2", 40)}
	for i := range 200 {
		ev.Commits = append(ev.Commits, scmtest.PushCommit{Commit: scmtest.Commit{SHA: fmt.Sprintf("%040x", i+1), Message: strings.Repeat("m", 1500)},
			Modified: []string{fmt.Sprintf("dir/file-%03d.yaml", i)}})
	}
	return ev
}

// TestWebhookStreamingVerifyForges runs each forge's parser on a real-shaped large push:
// signed, wrongly signed, unsigned and oversized. A missing header (and GitLab's wrong token)
// is refused with no body byte read; a body is read past the in-memory part into a spill file
// that is gone afterwards; nothing unverified reaches the parser.
func TestWebhookStreamingVerifyForges(t *testing.T) {
	const secret = "forge-secret-0123456789"
	for _, fc := range forgeCases {
		t.Run(fc.name, func(t *testing.T) {
			dir := t.TempDir()
			budget := scm.NewReadBudget(1 << 20)
			settings := scm.WebhookSettings{MemBody: 4 << 10, TempDir: dir, Budget: budget}
			do := func(t *testing.T, s scm.WebhookSettings, signWith string, edit func(*http.Request)) (*scm.Event, error, *bodyCounter, int64) {
				t.Helper()
				req, err := fc.request(context.Background(), "http://prflow.test/hooks/"+fc.name, signWith, largePush())
				if err != nil {
					t.Fatal(err)
				}
				size := req.ContentLength
				if size < 16<<10 {
					t.Fatalf("payload of %d bytes does not exercise the spill", size)
				}
				bc := &bodyCounter{r: req.Body, dir: dir}
				req.Body = bc
				if edit != nil {
					edit(req)
				}
				evs, err := fc.parser(s).ParseWebhook(req, []byte(secret))
				var ev *scm.Event
				if len(evs) > 1 {
					t.Fatalf("%d events from a one-branch push", len(evs))
				} else if len(evs) == 1 {
					ev = evs[0]
				}
				if left, _ := filepath.Glob(filepath.Join(dir, "prflow-webhook-*")); len(left) != 0 {
					t.Errorf("spill files left: %v", left)
				}
				if budget.InUse() != 0 {
					t.Errorf("budget not given back: %d", budget.InUse())
				}
				return ev, err, bc, size
			}
			t.Run("signed", func(t *testing.T) {
				ev, err, bc, size := do(t, settings, secret, nil)
				if err != nil || ev == nil || ev.Kind != scm.EventPush || ev.Branch != "main" || ev.Repo != "acme/web" || ev.After != strings.Repeat("2", 40) {
					t.Fatalf("got %+v, %v", ev, err)
				}
				if bc.n.Load() != size || !bc.sawSpill {
					t.Errorf("read %d of %d bytes, spilled %v", bc.n.Load(), size, bc.sawSpill)
				}
			})
			t.Run("wrong secret", func(t *testing.T) {
				ev, err, bc, _ := do(t, settings, "another-secret", nil)
				if !errors.Is(err, scm.ErrBadSignature) || ev != nil || !strings.Contains(err.Error(), fc.sigHdr) {
					t.Fatalf("got %+v, %v", ev, err)
				}
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the secret leaked into %q", err)
				}
				if fc.token && bc.n.Load() != 0 {
					t.Errorf("a wrong token read %d body bytes", bc.n.Load())
				}
				if !fc.token && !bc.sawSpill {
					t.Error("the HMAC was not computed over a streamed, spilled body")
				}
			})
			t.Run("missing header", func(t *testing.T) {
				ev, err, bc, _ := do(t, settings, secret, func(r *http.Request) { r.Header.Del(fc.sigHdr) })
				if !errors.Is(err, scm.ErrBadSignature) || ev != nil || !strings.Contains(err.Error(), "missing "+fc.sigHdr) {
					t.Fatalf("got %+v, %v", ev, err)
				}
				if bc.n.Load() != 0 {
					t.Errorf("%d body bytes read before refusing an unsigned delivery", bc.n.Load())
				}
			})
			t.Run("over the limit", func(t *testing.T) {
				s := settings
				s.MaxBody = 8 << 10
				_, err, bc, _ := do(t, s, secret, nil)
				if !errors.Is(err, scm.ErrTooLarge) || bc.n.Load() != 0 {
					t.Fatalf("by Content-Length: %v after %d bytes", err, bc.n.Load())
				}
				_, err, bc, _ = do(t, s, secret, func(r *http.Request) { r.ContentLength = -1 })
				if !errors.Is(err, scm.ErrTooLarge) || bc.n.Load() > 8<<10+1 {
					t.Fatalf("chunked: %v after %d bytes", err, bc.n.Load())
				}
			})
		})
	}
}
