package steps_test

import (
	"os"
	"testing"

	"github.com/prflow/prflow/pipelines/controller/ctltest/parallel"
)

func TestMain(m *testing.M) {
	parallel.Default(4) // the forge tests mostly wait on git, fake forges and NATS (docs/testing.md)
	os.Exit(m.Run())
}
