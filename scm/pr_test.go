package scm

import (
	"context"
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

type prsByNumber map[int]*PullRequest

func (m prsByNumber) GetPR(_ context.Context, _ Repo, n int) (*PullRequest, error) {
	if pr, ok := m[n]; ok {
		return pr, nil
	}
	return nil, ErrNotFound
}

func TestGetNewest(t *testing.T) {
	prs := prsByNumber{7: {Number: 7, State: PROpen}}
	pr, err := GetNewest(context.Background(), prs, "gitlab", "find MR h into main", "g/p", "merge request", "h", "main", 7)
	if err != nil || pr.Number != 7 {
		t.Fatalf("GetNewest = %+v, %v", pr, err)
	}
	_, err = GetNewest(context.Background(), prs, "gitlab", "find MR h into main", "g/p", "merge request", "h", "main", 0)
	var se *Error
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &se) || se.Provider != "gitlab" || se.Repo != "g/p" ||
		!strings.Contains(err.Error(), "no merge request from h into main") {
		t.Errorf("none matched: %v", err)
	}
	if err := CheckHeadBase("h", ""); err == nil || err.Error() != "head and base branches are required" {
		t.Errorf("CheckHeadBase without base: %v", err)
	}
	if err := CheckHeadBase("h", "main"); err != nil {
		t.Errorf("CheckHeadBase: %v", err)
	}
}
