package connector

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Secret references are the one syntax every prflow file that names a credential uses (the
// connectors file, the webhooks file, the server's tokens file) and the CLI's --token and
// PRFLOW_TOKEN:
//
//	env:NAME        the value of an environment variable
//	file:PATH       the trimmed content of a file (relative to the referring file's directory)
//	sha256:HEX      only where a secret is checked, never sent (the tokens file): its digest
//
// A plain value is refused in files: a secret written in a file that is shared, committed or
// printed in a review is no longer secret, and a typo such as "evn:X" would otherwise be taken
// as the token itself.

// SecretRefHelp is the accepted syntax, for messages.
const SecretRefHelp = "env:NAME or file:PATH"

// DigestRefHelp is the accepted syntax where a digest may stand in for the value.
const DigestRefHelp = "env:NAME, file:PATH or sha256:<64 hex digits>"

// ResolveSecretRef reads a secret reference: "env:NAME" (lookup nil = os.LookupEnv) or
// "file:PATH" (relative to baseDir). The value is never part of an error.
func ResolveSecretRef(ref, baseDir string, lookup func(string) (string, bool)) (Secret, error) {
	kind, arg, _ := strings.Cut(ref, ":")
	switch kind {
	case "env", "file":
		return resolveValue(kind, arg, baseDir, lookup)
	case "sha256":
		return Secret{}, fmt.Errorf("sha256: is a digest, which only a verifier can use; this secret is sent, so give the value as %s", SecretRefHelp)
	}
	return Secret{}, fmt.Errorf("want %s; secrets cannot be written in this file", SecretRefHelp)
}

// ResolveDigestRef reads a reference to a secret that is only checked (a bearer token the
// server accepts) and returns its SHA-256 digest: "sha256:HEX" as given, or the digest of an
// "env:" or "file:" value, which must be at least minLen characters long. Neither the value
// nor the digest is ever part of an error.
func ResolveDigestRef(ref, baseDir string, lookup func(string) (string, bool), minLen int) ([32]byte, error) {
	var d [32]byte
	kind, arg, _ := strings.Cut(ref, ":")
	switch kind {
	case "sha256":
		b, err := hex.DecodeString(arg)
		if err != nil || len(b) != len(d) {
			return d, fmt.Errorf("sha256: wants 64 hex digits (sha256sum of the token)")
		}
		copy(d[:], b)
		return d, nil
	case "env", "file":
		s, err := resolveValue(kind, arg, baseDir, lookup)
		if err != nil {
			return d, err
		}
		if len(s.Value()) < minLen {
			return d, fmt.Errorf("the %s secret is shorter than %d characters", kind, minLen)
		}
		return sha256.Sum256([]byte(s.Value())), nil
	}
	return d, fmt.Errorf("want %s; secrets cannot be written in this file", DigestRefHelp)
}

// ResolveCLISecret is --token and PRFLOW_TOKEN: "env:NAME" and "file:PATH" are resolved as in
// files (relative paths from the working directory); anything else is the value itself, since
// a flag or variable of the caller's own shell is not a shared file.
func ResolveCLISecret(v string) (Secret, error) {
	kind, _, ok := strings.Cut(v, ":")
	if ok && (kind == "env" || kind == "file") {
		return ResolveSecretRef(v, "", nil)
	}
	if strings.TrimSpace(v) == "" {
		return Secret{}, fmt.Errorf("empty")
	}
	return NewSecret(v), nil
}

func resolveValue(kind, arg, baseDir string, lookup func(string) (string, bool)) (Secret, error) {
	if arg == "" {
		return Secret{}, fmt.Errorf("%s: needs a %s", kind, map[string]string{"env": "variable name", "file": "path"}[kind])
	}
	if kind == "env" {
		if lookup == nil {
			lookup = os.LookupEnv
		}
		v, found := lookup(arg)
		if !found || strings.TrimSpace(v) == "" {
			return Secret{}, fmt.Errorf("environment variable %s is not set or empty", arg)
		}
		return NewSecret(strings.TrimSpace(v)), nil
	}
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
