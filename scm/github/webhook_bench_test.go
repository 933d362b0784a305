package github

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/prflow/prflow/scm/scmconformance"
)

func benchParse(b *testing.B, event string, body []byte) {
	p := &WebhookParser{MaxBody: 32 << 20} // the old default (1 MiB) refused the big push
	scmconformance.BenchParse(b, p, hookFormat, event, body, sign(hookSecret, body), hookSecret)
}

func BenchmarkParseWebhook(b *testing.B) {
	benchParse(b, "pull_request", scmconformance.Testdata(b, "pull_request_closed.json"))
}

// BenchmarkParseWebhookBigPush parses a push of 2,048 commits (GitHub lists at most 2,048 in
// one push payload), the largest body a forge sends prflow.
func BenchmarkParseWebhookBigPush(b *testing.B) {
	benchParse(b, "push", bigPush(b, 2048))
}

func bigPush(t testing.TB, n int) []byte {
	var doc map[string]any
	if err := json.Unmarshal(scmconformance.Testdata(t, "push.json"), &doc); err != nil {
		t.Fatal(err)
	}
	commit := doc["commits"].([]any)[0].(map[string]any)
	var commits []any
	for i := range n {
		c := map[string]any{}
		for k, v := range commit {
			c[k] = v
		}
		c["id"] = fmt.Sprintf("%040x", i+1)
		c["modified"] = []string{fmt.Sprintf("services/svc-%d/values.yaml", i%300)}
		commits = append(commits, c)
	}
	doc["commits"] = commits
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
