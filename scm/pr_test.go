package scm

import (
	"errors"
	"strings"
	"testing"
)

func TestMergeInputRefused(t *testing.T) {
	merged := &PullRequest{Number: 4, State: PRMerged, HeadSHA: "abc"}
	for _, tt := range []struct {
		name     string
		in       MergeInput
		pr       *PullRequest
		done     bool
		sentinel error
		msg      string
	}{
		{name: "merged at the reviewed head", in: MergeInput{SHA: "abc"}, pr: merged, done: true},
		{name: "merged, no head named", pr: merged, done: true},
		{name: "merged at another head", in: MergeInput{SHA: "def"}, pr: merged, sentinel: ErrConflict, msg: "MR was already merged at head abc, not def"},
		{name: "closed", in: MergeInput{SHA: "abc"}, pr: &PullRequest{State: PRClosed, HeadSHA: "abc"}, sentinel: ErrNotMergeable, msg: "the merge request is closed: 405 Method Not Allowed"},
		{name: "open", in: MergeInput{SHA: "abc"}, pr: &PullRequest{State: PROpen, HeadSHA: "abc"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			done, err := tt.in.Refused(tt.pr, "MR", "merge request", "405 Method Not Allowed")
			if done != tt.done || tt.in.Done(tt.pr) != tt.done {
				t.Errorf("done = %v, Done = %v, want %v", done, tt.in.Done(tt.pr), tt.done)
			}
			if tt.sentinel == nil {
				if err != nil {
					t.Errorf("err = %v", err)
				}
				return
			}
			if !errors.Is(err, tt.sentinel) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("err = %v, want %v saying %q", err, tt.sentinel, tt.msg)
			}
		})
	}
}
