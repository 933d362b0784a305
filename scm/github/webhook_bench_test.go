package github

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
)

func BenchmarkParseWebhook(b *testing.B) {
	body := readTestdata(b, "pull_request_closed.json")
	p := &WebhookParser{}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.Header.Set(headerEvent, "pull_request")
		r.Header.Set(headerSignature, sign(hookSecret, body))
		ev, err := p.ParseWebhook(r, hookSecret)
		if err != nil || ev == nil {
			b.Fatal(ev, err)
		}
	}
}
