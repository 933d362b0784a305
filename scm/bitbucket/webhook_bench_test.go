package bitbucket

import (
	"testing"

	"github.com/prflow/prflow/scm/scmconformance"
)

func BenchmarkParseWebhook(b *testing.B) {
	body := scmconformance.Testdata(b, "pullrequest_fulfilled.json")
	scmconformance.BenchParse(b, &WebhookParser{}, hookFormat, "pullrequest:fulfilled", body, sign(hookSecret, body), hookSecret)
}
