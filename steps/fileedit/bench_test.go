package fileedit

import (
	"bytes"
	"fmt"
	"testing"
)

// bigValues builds a commented Helm values file of about 2,000 lines: one
// block per microservice, each with nested maps, lists of maps, quoted and
// plain strings and a block scalar.
func bigValues(services int) []byte {
	var b bytes.Buffer
	b.WriteString("# Umbrella chart values for the shop.\nglobal:\n  registry: registry.example.com\n  pullPolicy: IfNotPresent\n\n")
	for i := range services {
		fmt.Fprintf(&b, `# --- service %[1]d ---------------------------------------------
svc%[1]d:
  enabled: true
  replicaCount: %[2]d
  image:
    repository: registry.example.com/shop/svc%[1]d
    # Set by the release pipeline.
    tag: "1.%[1]d.0"   # current release
  service:
    type: ClusterIP
    port: 80
  env:
    - name: LOG_LEVEL
      value: info
    - name: UPSTREAM
      value: "http://svc%[3]d.shop.svc.cluster.local:8080"
  resources:
    limits:
      cpu: 500m
      memory: 256Mi
    requests: {}
  config: |
    [server]
    listen = ":8080"
    name = "svc%[1]d"
  tolerations: []

`, i, i%5+1, (i+1)%services)
	}
	return b.Bytes()
}

func BenchmarkApplyYAML2000Lines(b *testing.B) {
	src := bigValues(74)
	if n := bytes.Count(src, []byte("\n")); n < 1900 || n > 2200 {
		b.Fatalf("fixture has %d lines", n)
	}
	changes := []Change{
		{Key: "svc7.image.tag", Value: "1.7.1"},
		{Key: "svc40.replicaCount", Value: int64(6)},
		{Key: "svc73.resources.requests.cpu", Value: "100m"},
	}
	out, changed, err := Apply(YAML, src, changes, Options{})
	if err != nil || !changed {
		b.Fatalf("Apply: %v, changed=%v", err, changed)
	}
	if del, add := diffLines(src, out); len(del) != 3 || add != 4 {
		b.Fatalf("diff: deleted %v, added %d", del, add)
	}
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, _, err := Apply(YAML, src, changes, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyYAMLNoop is the redelivered-job case: every value is
// already present.
func BenchmarkApplyYAMLNoop(b *testing.B) {
	src := bigValues(74)
	changes := []Change{
		{Key: "svc7.image.tag", Value: "1.7.0"},
		{Key: "svc40.replicaCount", Value: int64(1)},
		{Key: "svc73.resources.limits.cpu", Value: "500m"},
	}
	if _, changed, err := Apply(YAML, src, changes, Options{}); err != nil || changed {
		b.Fatalf("Apply: %v, changed=%v", err, changed)
	}
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Apply(YAML, src, changes, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkApplyJSON(b *testing.B) {
	var buf bytes.Buffer
	buf.WriteString("{\n")
	for i := range 300 {
		fmt.Fprintf(&buf, "  \"svc%d\": {\n    \"image\": {\"repository\": \"r/svc%d\", \"tag\": \"1.0.%d\"},\n    \"replicas\": 2,\n    \"ports\": [80, 443]\n  },\n", i, i, i)
	}
	buf.WriteString("  \"end\": true\n}\n")
	src := buf.Bytes()
	changes := []Change{
		{Key: "svc7.image.tag", Value: "1.7.1"},
		{Key: "svc150.replicas", Value: int64(6)},
		{Key: "svc299.ports[2]", Value: int64(8443)},
	}
	if _, _, err := Apply(JSON, src, changes, Options{}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Apply(JSON, src, changes, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
