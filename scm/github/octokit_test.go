package github

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"path"
	"reflect"
	"strings"
	"testing"

	gh "github.com/google/go-github/v62/github"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/scmconformance"
)

// octokitExample is one payload example of octokit/webhooks: the event kind is its folder.
type octokitExample struct {
	name, kind string
	body       []byte
}

// octokitExamples reads testdata/octokit-webhooks-examples.tar.gz (see its LICENSE file).
func octokitExamples(t *testing.T) []octokitExample {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(scmconformance.Testdata(t, "octokit-webhooks-examples.tar.gz")))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out []octokitExample
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg || !strings.HasSuffix(h.Name, ".json") {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, octokitExample{name: h.Name, kind: path.Base(path.Dir(h.Name)), body: b})
	}
	if len(out) < 300 {
		t.Fatalf("%d examples in the archive, want all of them (312)", len(out))
	}
	return out
}

// TestParseWebhookOctokitExamples feeds every payload example of octokit/webhooks through
// the parser: none is refused (GitHub does not redeliver a refused delivery), the kinds and
// actions prflow uses give their event, all others are ignored. Among them are check_run
// rerequested examples whose app.created_at is not RFC 3339, a field prflow never reads.
func TestParseWebhookOctokitExamples(t *testing.T) {
	handled := map[string]int{}
	for _, ex := range octokitExamples(t) {
		evs, err := fixedParser().ParseWebhook(hookRequest(ex.kind, ex.body, sign(hookSecret, ex.body)), hookSecret)
		if err != nil {
			t.Errorf("%s: %v", ex.name, err)
			continue
		}
		if len(evs) > 1 {
			t.Errorf("%s: %d events, GitHub sends one change per delivery", ex.name, len(evs))
			continue
		}
		var p struct {
			Action      string
			Ref         string
			PullRequest struct{ Merged bool } `json:"pull_request"`
		}
		_ = scm.DecodeWebhookJSON(ex.body, &p) // loosely, for the expectations only
		want := ""
		switch ex.kind {
		case "push":
			if strings.HasPrefix(p.Ref, "refs/heads/") {
				want = string(scm.EventPush)
			}
		case "pull_request":
			if _, ok := prActions[p.Action]; ok || p.Action == "closed" {
				want = string(scm.EventPullRequest)
			}
		case "status", "check_run", "check_suite":
			want = string(scm.EventStatus)
		}
		got := ""
		if len(evs) == 1 {
			got = string(evs[0].Kind)
		}
		if got != want {
			t.Errorf("%s (action %q): event %q, want %q", ex.name, p.Action, got, want)
			continue
		}
		if got == "" {
			continue
		}
		handled[ex.kind]++
		ev := evs[0]
		if ev.Repo == "" || ev.DeliveryID == "" {
			t.Errorf("%s: event without repo or delivery: %+v", ex.name, ev)
		}
		switch ev.Kind {
		case scm.EventPush:
			if ev.Branch == "" || ev.After == "" {
				t.Errorf("%s: push %+v", ex.name, ev)
			}
		case scm.EventPullRequest:
			if ev.PR == nil || ev.PR.Number <= 0 || ev.Action == "" || ev.PR.HeadSHA == "" || ev.PR.Base == "" {
				t.Errorf("%s: PR event %+v", ex.name, ev)
			}
			if p.Action == "closed" && (ev.Action == scm.PRMergedEvt) != p.PullRequest.Merged {
				t.Errorf("%s: closed with merged=%v gave %s", ex.name, p.PullRequest.Merged, ev.Action)
			}
		case scm.EventStatus:
			if ev.SHA == "" || ev.State == "" {
				t.Errorf("%s: status event %+v", ex.name, ev)
			}
		}
	}
	for _, k := range []string{"push", "pull_request", "status", "check_run", "check_suite"} {
		if handled[k] == 0 {
			t.Errorf("no %s example gave an event", k)
		}
	}
}

// TestParseWebhookReadFields: for every example go-github decodes, decoding only the fields
// prflow reads (what a payload with a malformed unread field falls back to) gives the same
// event, so readFields keeps every field the normalisers read.
func TestParseWebhookReadFields(t *testing.T) {
	n := 0
	for _, ex := range octokitExamples(t) {
		if _, ok := readFields[ex.kind]; !ok {
			continue
		}
		strict, err := gh.ParseWebHook(ex.kind, ex.body)
		if err != nil {
			continue // the malformed examples: TestParseWebhookOctokitExamples covers them
		}
		slim, err := parseRead(ex.kind, ex.body, errors.New("strict decode failed"))
		if err != nil {
			t.Errorf("%s: %v", ex.name, err)
			continue
		}
		want, err1 := normalise(strict)
		got, err2 := normalise(slim)
		if !reflect.DeepEqual(got, want) || (err1 == nil) != (err2 == nil) {
			t.Errorf("%s: from the read fields %+v, %v; from the whole payload %+v, %v", ex.name, got, err2, want, err1)
		}
		n++
	}
	if n < 85 {
		t.Errorf("compared %d examples, want every decodable one", n)
	}
}

// TestParseWebhookMalformedReadField: leniency covers only fields prflow does not read. A
// malformed field it reads (the PR number, a commit's file list) is still refused with the
// field named, and a malformed unread field next to it does not hide that.
func TestParseWebhookMalformedReadField(t *testing.T) {
	for _, tt := range []struct{ event, body, want string }{
		{"pull_request", `{"action":"opened","repository":{"full_name":"a/b","created_at":"yesterday"},"pull_request":{"number":"seven"}}`, `field "pull_request.number" has type string`},
		{"push", `{"ref":"refs/heads/main","repository":{"full_name":"a/b"},"commits":[{"added":"x.txt","timestamp":"now"}]}`, `field "commits.added" has type string`},
		{"check_run", `{"action":"rerequested","repository":{"full_name":"a/b"},"check_run":{"head_sha":7,"app":{"created_at":"2018-04-25 20:42:10"}}}`, `field "check_run.head_sha" has type number`},
	} {
		body := []byte(tt.body)
		evs, err := fixedParser().ParseWebhook(hookRequest(tt.event, body, sign(hookSecret, body)), hookSecret)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "malformed JSON") {
			t.Errorf("%s: got %+v, %v; want malformed JSON naming %s", tt.event, evs, err, tt.want)
		}
	}
	// The same payloads with the unread fields malformed only are events.
	for _, tt := range []struct{ event, body string }{
		{"pull_request", `{"action":"opened","repository":{"full_name":"a/b","created_at":"yesterday"},"pull_request":{"number":7,"created_at":[],"user":"nobody","head":{"sha":"ab","repo":5}}}`},
		{"push", `{"ref":"refs/heads/main","repository":{"full_name":"a/b","pushed_at":"soon"},"commits":[{"added":["x.txt"],"timestamp":"now"}]}`},
		{"check_run", `{"action":"rerequested","repository":{"full_name":"a/b"},"check_run":{"head_sha":"ab12","app":{"created_at":"2018-04-25 20:42:10"}}}`},
	} {
		body := []byte(tt.body)
		evs, err := fixedParser().ParseWebhook(hookRequest(tt.event, body, sign(hookSecret, body)), hookSecret)
		if err != nil || len(evs) != 1 || evs[0].Repo != "a/b" {
			t.Errorf("%s: got %+v, %v; want one event", tt.event, evs, err)
		}
	}
}
