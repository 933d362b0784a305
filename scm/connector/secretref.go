package connector

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ResolveSecretRef reads a secret reference: "env:NAME" (lookup nil = os.LookupEnv) or
// "file:PATH" (relative to baseDir). The value is never part of an error.
func ResolveSecretRef(ref, baseDir string, lookup func(string) (string, bool)) (Secret, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	kind, arg, ok := strings.Cut(ref, ":")
	switch {
	case ok && kind == "env" && arg != "":
		v, found := lookup(arg)
		if !found || strings.TrimSpace(v) == "" {
			return Secret{}, fmt.Errorf("environment variable %s is not set or empty", arg)
		}
		return NewSecret(strings.TrimSpace(v)), nil
	case ok && kind == "file" && arg != "":
		path := arg
		if baseDir != "" && !filepath.IsAbs(path) {
			path = filepath.Join(baseDir, path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return Secret{}, fmt.Errorf("read secret file %s: %v", path, cause(err))
		}
		v := strings.TrimSpace(string(data))
		if v == "" {
			return Secret{}, fmt.Errorf("secret file %s is empty", path)
		}
		return NewSecret(v), nil
	}
	return Secret{}, fmt.Errorf("want env:NAME or file:PATH; secrets cannot be written in this file")
}
