package scm

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestFileReaderReadFile(t *testing.T) {
	files := map[string]string{"main:envs/dev.yaml": "a: 1\n"}
	var ops []string
	read := FileReader(func(_ context.Context, repo Repo, op, ref, path string) ([]byte, bool, error) {
		ops = append(ops, op)
		if repo != "o/r" {
			return nil, false, errors.New("wrong repo")
		}
		if ref == "boom" {
			return nil, false, &Error{Provider: "fake", Op: op, Repo: repo, Status: 500, Err: errors.New("server error")}
		}
		data, ok := files[ref+":"+path]
		return []byte(data), ok, nil
	})
	ctx := context.Background()

	data, err := read.ReadFile(ctx, "fake", "o/r", "main", "envs/dev.yaml")
	if err != nil || string(data) != "a: 1\n" {
		t.Fatalf("ReadFile = %q, %v", data, err)
	}
	if ops[0] != "read file envs/dev.yaml@main" {
		t.Errorf("op = %q", ops[0])
	}

	_, err = read.ReadFile(ctx, "fake", "o/r", "main", "envs/prod.yaml")
	var se *Error
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &se) || se.Status != http.StatusNotFound || se.Provider != "fake" || se.Repo != "o/r" {
		t.Fatalf("missing file: %#v", err)
	}
	if !strings.Contains(err.Error(), "no file envs/prod.yaml at main") {
		t.Errorf("missing file error does not name the path and ref: %v", err)
	}

	// A read that failed is passed through as it is, not turned into "not found".
	_, err = read.ReadFile(ctx, "fake", "o/r", "boom", "x")
	if errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "server error") {
		t.Errorf("failed read: %v", err)
	}

	at := read.At("o/r")
	data, ok, err := at(ctx, "main", "envs/dev.yaml")
	if err != nil || !ok || string(data) != "a: 1\n" {
		t.Errorf("At = %q, %v, %v", data, ok, err)
	}
	if _, ok, err := at(ctx, "main", "gone"); ok || err != nil {
		t.Errorf("At on a missing file = %v, %v; want absent, no error", ok, err)
	}
	if last := ops[len(ops)-1]; last != "read file gone@main" {
		t.Errorf("At op = %q", last)
	}
}

func TestCheckRead(t *testing.T) {
	for _, tt := range []struct{ ref, path, want string }{
		{"main", "a/b.yaml", ""},
		{"", "a/b.yaml", "empty ref"},
		{"main", "", "empty file path"},
		{"main", "/etc/passwd", "must be relative"},
		{"main", "a/../../b", "empty, . or .. segment"},
		{"", "../x", "segment"}, // the path is reported first
	} {
		err := CheckRead(tt.ref, tt.path)
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("CheckRead(%q, %q) = %v, want %q", tt.ref, tt.path, err, tt.want)
		}
	}
}
