//go:build goexperiment.jsonv2

package pipelines

import (
	jsonv2 "encoding/json/v2"
	"testing"
	"time"
)

// With GOEXPERIMENT=jsonv2 the standard library's v2 encoder is measured beside the hand
// encoder (issue 19 asked whether it makes AppendJSON unnecessary):
//
//	GOEXPERIMENT=jsonv2 go test -run JSONv2 -bench RunEncode ./pipelines/
func BenchmarkRunEncodeJSONv2(b *testing.B) {
	r := sampleRun(time.Now())
	for b.Loop() {
		_, _ = jsonv2.Marshal(r)
	}
}
