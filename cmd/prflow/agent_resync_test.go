package main

import (
	"strings"
	"testing"
)

// A non-positive --resync is refused at start, naming the flag.
func TestAgentRejectsBadResync(t *testing.T) {
	for _, v := range []string{"0", "-1m"} {
		_, err := run(t, "agent", "--embedded", "--agent-id", "x", "--argocd-url", "http://127.0.0.1:1", "--resync", v)
		if err == nil || !strings.Contains(err.Error(), "--resync") || !strings.Contains(err.Error(), "positive duration") {
			t.Errorf("--resync %s: %v", v, err)
		}
	}
	if _, err := run(t, "agent", "--embedded", "--agent-id", "x", "--resync", "soon"); err == nil || !strings.Contains(err.Error(), "--resync") {
		t.Errorf("--resync soon: %v", err)
	}
}
