package github

import (
	"testing"

	"github.com/prflow/prflow/scm/scmconformance"
	"github.com/prflow/prflow/scm/scmtest"
)

// TestRegisteredWithConnectors builds the driver from a connectors file through the default
// registry and runs the connector check (Whoami + RepoExists) against the fake.
func TestRegisteredWithConnectors(t *testing.T) {
	scmconformance.Registered(t, Name, scmtest.NewGitHub(t))
}
