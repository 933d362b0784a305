package e2e

import (
	"os"
	"testing"

	"github.com/prflow/prflow/pipelines/controller/ctltest/parallel"
)

func TestMain(m *testing.M) {
	parallel.Default(4) // the tests mostly wait on fake latencies, parked steps and graces (parallelTests)
	os.Exit(m.Run())
}
