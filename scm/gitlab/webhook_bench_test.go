package gitlab

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prflow/prflow/scm/scmconformance"
)

func BenchmarkParseWebhook(b *testing.B) {
	body := scmconformance.Testdata(b, "merge_request_merge.json")
	p := &WebhookParser{}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.Header.Set(headerEvent, "Merge Request Hook")
		r.Header.Set(headerToken, string(hookSecret))
		ev, err := scmconformance.One(p.ParseWebhook(r, hookSecret))
		if err != nil || ev == nil {
			b.Fatal(ev, err)
		}
	}
}
