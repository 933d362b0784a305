package gitlab

import (
	"testing"

	"github.com/prflow/prflow/scm/scmconformance"
)

func BenchmarkParseWebhook(b *testing.B) {
	body := scmconformance.Testdata(b, "merge_request_merge.json")
	scmconformance.BenchParse(b, &WebhookParser{}, hookFormat, "Merge Request Hook", body, string(hookSecret), hookSecret)
}
