//go:build !prflow_stdjson

package pipelines

// stdRunJSON: see runjson_std.go.
const stdRunJSON = false
