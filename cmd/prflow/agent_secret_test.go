package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestSecretRef(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "secret", "  hook-s3cret\n")
	empty := writeFile(t, dir, "empty", "\n")
	t.Setenv("PRFLOW_TEST_HOOK_SECRET", "from-env")
	cases := []struct {
		name, file, env, want, err string
	}{
		{name: "none"},
		{name: "file", file: good, want: "hook-s3cret"},
		{name: "env", env: "PRFLOW_TEST_HOOK_SECRET", want: "from-env"},
		{name: "both", file: good, env: "PRFLOW_TEST_HOOK_SECRET", err: "--appset-webhook-secret-file and --appset-webhook-secret-env are exclusive"},
		{name: "missing file", file: filepath.Join(dir, "nope"), err: "--appset-webhook-secret-file: open"},
		{name: "empty file", file: empty, err: "is empty"},
		{name: "unset env", env: "PRFLOW_TEST_NO_SUCH_VAR", err: "environment variable PRFLOW_TEST_NO_SUCH_VAR is empty or unset"},
	}
	for _, c := range cases {
		got, err := secretRef(c.file, c.env, "appset-webhook-secret")
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.name, err, c.err)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Errorf("%s: the error shows the secret: %v", c.name, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}
