package steps

import (
	"strings"
	"testing"
)

// TestServicesByName: the by-name compatibility path fills the typed fields, Get answers nil
// (not a typed nil) for what is absent, a value lacking its interface is left out, and an
// unknown name is a programming error.
func TestServicesByName(t *testing.T) {
	s := NewServices(map[string]any{ServiceRunURL: func(id string) string { return "/runs/" + id }, ServiceGitOps: "not a client"})
	if s.RunURL == nil || s.RunURL("r1") != "/runs/r1" {
		t.Fatal("RunURL not set")
	}
	if f, ok := s.Get(ServiceRunURL).(func(string) string); !ok || f("x") != "/runs/x" {
		t.Error("Get(runURL)")
	}
	if s.GitOps != nil || s.Get(ServiceGitOps) != nil {
		t.Error("a value without the GitOps interface must be left out")
	}
	for _, name := range []string{ServiceSCM, ServiceLocks, ServiceMetrics, ServiceNotify, ServiceNotifyMarks, "nope"} {
		if v := s.Get(name); v != nil {
			t.Errorf("Get(%s) = %#v, want nil", name, v)
		}
	}
	if (Services{}).Get(ServiceRunURL) != nil {
		t.Error("Get(runURL) of a nil func must be nil")
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), `unknown service "scms"`) {
			t.Errorf("unknown name: recover() = %v", r)
		}
	}()
	NewServices(map[string]any{"scms": nil})
}

// TestRegisterAgain: a Definition looked up and registered into another registry (test stacks
// do) keeps its derived inputs and its load-time check, wrapped once.
func TestRegisterAgain(t *testing.T) {
	d, _ := Default.Lookup("RevertPR")
	r := NewRegistry()
	r.Register(*d)
	again, _ := r.Lookup("RevertPR")
	if len(again.Inputs) != len(d.Inputs) {
		t.Fatalf("inputs %d, want %d", len(again.Inputs), len(d.Inputs))
	}
	if err := again.Validate(map[string]any{"commitId": "abc", "mainlin": 1}); err == nil || !strings.Contains(err.Error(), "mainlin: unknown input") {
		t.Errorf("validate: %v", err)
	}
	if err := again.Validate(map[string]any{"commitId": ""}); err == nil || !strings.Contains(err.Error(), "commitId: required (the commit to revert") {
		t.Errorf("the step's own check: %v", err)
	}
}
