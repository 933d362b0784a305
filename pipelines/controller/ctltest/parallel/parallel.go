// Package parallel sets how many tests of a package run at once when the go test command line
// does not say (-parallel). Go's default is GOMAXPROCS, right for tests that compute; the
// controller, UI and step tests mostly wait (AckWait windows, server restarts, child worker
// processes, real Prometheus scrapes, JetStream writes): on a 2-core machine a package of
// them used a fifth of a core, so two tests at a time left the machine idle.
package parallel

import (
	"flag"
	"strconv"
)

// Default sets -test.parallel to n unless the command line set it. Call it from TestMain,
// before m.Run.
func Default(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
