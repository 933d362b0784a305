package main

import "time"

// The tests run the sandbox's simulated agent at the pace the e2e tests give it: the
// assertions wait on states, not on how long a sync takes, and the default pace (made for
// watching `prflow dev`) cost seconds per sync across the dev and server tests.
func init() {
	sandboxPace.Delay, sandboxPace.Step = 30*time.Millisecond, 20*time.Millisecond
}
