package e2e

import (
	"flag"
	"os"
	"testing"
)

// e2eParallel is how many of the package's tests run at once unless -parallel is given.
// The tests wait on fake latencies, timeouts and parked steps far more than they compute
// (one test alone: about 1 s of CPU for 12–38 s of wall time, measured with the race
// detector), so more of them than GOMAXPROCS share two cores well: eight of them took
// 53 s one after the other, 28 s two at a time and 24 s four at a time.
const e2eParallel = "4"

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", e2eParallel)
	}
	os.Exit(m.Run())
}
