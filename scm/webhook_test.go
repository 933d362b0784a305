package scm

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

func TestEventDedupeKey(t *testing.T) {
	push := Event{Provider: "gitlab", DeliveryID: "u1", Kind: EventPush, Branch: "main", After: "abc"}
	merged := Event{Provider: "gitlab", DeliveryID: "u1", Kind: EventPullRequest, Action: PRMergedEvt, PR: &PullRequest{Number: 4}}
	labeled := merged
	labeled.Action, labeled.Label = PRLabeled, "deploy"
	deleted := push
	deleted.After, deleted.Deleted = ZeroSHA, true
	status := Event{Provider: "gitlab", DeliveryID: "u1", Kind: EventStatus, SHA: "abc", Context: "pipeline", State: StatusSuccess}
	keys := map[string]string{}
	for name, ev := range map[string]Event{"push": push, "merged": merged, "labeled": labeled, "deleted": deleted, "status": status} {
		k := ev.DedupeKey()
		if !strings.HasPrefix(k, "gitlab/u1/") {
			t.Errorf("%s: key %q does not start with provider/delivery", name, k)
		}
		if other, dup := keys[k]; dup {
			t.Errorf("%s and %s share the key %q", name, other, k)
		}
		keys[k] = name
	}
	again := push
	if again.DedupeKey() != push.DedupeKey() {
		t.Error("the same event gave two keys")
	}
	otherForge := push
	otherForge.Provider = "github"
	if otherForge.DedupeKey() == push.DedupeKey() {
		t.Error("two forges share a key")
	}
}

func TestReadHook(t *testing.T) {
	r := httptest.NewRequest("POST", "/", bytes.NewReader([]byte(`{"a":1}`)))
	r.Header.Set("X-Event", "push")
	h, err := ReadHook(r, "github", "X-Event", "X-Delivery", 0)
	if err != nil {
		t.Fatal(err)
	}
	if h.Kind != "push" || !strings.HasPrefix(h.Delivery, "sha256:") || string(h.Body) != `{"a":1}` {
		t.Errorf("got %+v", h)
	}
	if err := h.Errorf("bad %s", "thing"); err.Error() != "github webhook push: bad thing" {
		t.Errorf("Errorf = %q", err)
	}
	r = httptest.NewRequest("POST", "/", bytes.NewReader(make([]byte, 100)))
	r.Header.Set("X-Delivery", "d-7")
	_, err = ReadHook(r, "gitlab", "X-Event", "X-Delivery", 10)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "gitlab webhook (delivery d-7)") {
		t.Errorf("err = %v", err)
	}
}

func TestChangedPathsAndRefs(t *testing.T) {
	if got := ChangedPaths([]string{"a", "b"}, nil, []string{"b", "c"}); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("ChangedPaths = %v", got)
	}
	for _, tc := range []struct {
		ref, branch string
		ok          bool
	}{{"refs/heads/release/1.4", "release/1.4", true}, {"refs/tags/v1", "", false}, {"refs/heads/", "", false}} {
		if b, ok := BranchOfRef(tc.ref); b != tc.branch || ok != tc.ok {
			t.Errorf("BranchOfRef(%q) = %q, %v", tc.ref, b, ok)
		}
	}
	if !IsZeroSHA(ZeroSHA) || !IsZeroSHA("") || IsZeroSHA("0a") {
		t.Error("IsZeroSHA")
	}
}
