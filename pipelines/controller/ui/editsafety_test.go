package ui_test

import (
	"strings"
	"testing"
)

// The run page says when a stage was already promoted (with the revision that held the
// values) and lists what an edit created; a stage that changed something is not marked.
func TestRunPageMarksAlreadyPromotedAndCreated(t *testing.T) {
	t.Parallel()
	page := finishedRunPage(t, `name: x
stages:
  - id: dev
    steps:
      - id: update
        type: Noop
        with: {outputs: {alreadyPromoted: true, revision: "0123456789abcdef0123456789abcdef01234567", prNumber: ""}}
  - id: qa
    steps:
      - id: update
        type: Noop
        with: {outputs: {prNumber: 7, created: ["envs/qa/config.json: image.tga", "envs/qa/extra.yaml (new file)"]}}
`)
	for _, want := range []string{
		`already promoted: the release repo held every value at <code title="0123456789abcdef0123456789abcdef01234567">`,
		`created (new in the release repo): <code>envs/qa/config.json: image.tga</code>, <code>envs/qa/extra.yaml (new file)</code>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("run page lacks %s", want)
		}
	}
	if n := strings.Count(page, "already promoted:"); n != 1 {
		t.Errorf("%d stages marked already promoted, want 1 (dev)", n)
	}
}
