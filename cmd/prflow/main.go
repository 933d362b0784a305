// Command prflow runs GitOps PR pipelines: `prflow dev` runs everything in one process;
// `server`, `worker` and `agent` are the production roles; the rest are clients.
package main

import (
	"fmt"
	"os"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		var ec exitCoder
		if asExit(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}
