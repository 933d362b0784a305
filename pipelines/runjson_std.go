//go:build prflow_stdjson

package pipelines

// stdRunJSON makes Run.AppendJSON use encoding/json (build tag prflow_stdjson), to measure the
// hand encoder against it on the whole path (BenchmarkFullPath).
const stdRunJSON = true
