package queue

import (
	"strings"
	"testing"
)

// A cluster's URL list carries user info in every URL: none of it reaches a log.
func TestRedactURLList(t *testing.T) {
	got := redactURL("nats://w:s3cret@127.0.0.1:4222,nats://w:s3cret@127.0.0.1:4223")
	if strings.Contains(got, "s3cret") || strings.Count(got, "redacted@") != 2 {
		t.Fatalf("redactURL = %q", got)
	}
}
