package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// After an earlier stage fails, no later stage may touch the release repo: prod's config must
// be byte-identical after the run, and prod must be reported as not run, never as running.
func TestDevFailedStageStopsThePromotion(t *testing.T) {
	promote, err := os.ReadFile(filepath.Join("..", "..", "examples", "pipelines", "promote.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	promotion, err := os.ReadFile(filepath.Join("..", "..", "examples", "pipelines", "promotion.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(promotion), "    image.tag: ") {
		t.Fatal("promotion.yaml no longer sets image.tag; update the test")
	}
	// The outside tester's typo: dev's cluster names an agent that does not exist.
	typo := strings.Replace(string(promote), "clusters: [{name: dev-eu, agent: sim}]", "clusters: [{name: dev-eu, agent: eu}]", 1)
	if typo == string(promote) {
		t.Fatal("promote.yaml no longer has dev's cluster line; update the test")
	}
	cases := []struct {
		name, pipeline string
		args           []string
	}{
		{"promote.yaml with an agent typo in dev", typo, nil},
		// A mistyped key: dev refuses it before any write; prod's PR would set replicas: 3,
		// so a prod that ran would change prod's file.
		{"promotion.yaml with a mistyped key", strings.Replace(string(promotion), "    image.tag: ", "    image.tga: ", 1), nil},
	}
	want, err := os.ReadFile(filepath.Join("..", "..", "examples", "release-repo", "envs", "prod", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join("..", "..", "examples", "pipelines", "promotion.yaml")
			if tc.pipeline != "" {
				file = filepath.Join(dir, "promote.yaml")
				if err := os.WriteFile(file, []byte(tc.pipeline), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			data := filepath.Join(dir, "data")
			args := append([]string{"dev", "--log-level", "error", "--data-dir", data, "--pipeline", file}, tc.args...)
			out, err := run(t, args...)
			// Either the run is refused before any step (the agent typo, caught by the
			// run-start check) or it fails in dev; never exit 0.
			var ee exitError
			if err == nil || (errors.As(err, &ee) && ee.code == 0) {
				t.Fatalf("want a non-zero exit, got %v\n%s", err, out)
			}
			if !errors.As(err, &ee) && !strings.Contains(err.Error(), "refused") {
				t.Fatalf("want a failed run or a refusal, got %v\n%s", err, out)
			}
			if strings.Contains(out, "stage prod: running") || strings.Contains(out, "stage prod: succeeded") {
				t.Errorf("prod ran after dev failed:\n%s", out)
			}
			if strings.Contains(out, "stage dev: failed") && !strings.Contains(out, "stage prod: not run (dev failed)") {
				t.Errorf("prod is not reported as not run because of dev:\n%s", out)
			}
			got, err := exec.Command("git", "--git-dir", filepath.Join(data, "git", "acme", "release.git"), "show", "main:envs/prod/config.json").Output()
			if err != nil {
				t.Fatalf("read prod's config from the release repo: %v", err)
			}
			if string(got) != string(want) {
				t.Errorf("prod's config changed:\n%s\nwant\n%s", got, want)
			}
		})
	}
}
