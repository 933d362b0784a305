package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// No daemon here to build the Dockerfile, so this keeps it saying what the daemonless build
// does: the same user, entrypoint, files and a static build.
func TestDockerfileMatchesImageBuild(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{
		"FROM scratch",
		fmt.Sprintf("USER %d:%d", UID, GID),
		fmt.Sprintf(`ENTRYPOINT ["%s"]`, BinPath),
		"CGO_ENABLED=0",
		"-trimpath",
		"-X main.version=",
		fmt.Sprintf("%s:x:%d:%d:", UserName, UID, GID),
		CABundlePath,
		"chmod 1777 /out/tmp",
		"SSL_CERT_FILE=" + CABundlePath,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}
