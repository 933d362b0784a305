package rbac

import (
	"os"
	"regexp"
	"testing"
)

var exampleRE = regexp.MustCompile("(?s)<!-- example: ([a-z-]+) -->\n```yaml\n(.*?)```")

// TestDocExamples loads the example policies of docs/rbac.md and checks that each does what
// the text says.
func TestDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/rbac.md")
	if err != nil {
		t.Fatal(err)
	}
	ex := map[string]*Policy{}
	for _, m := range exampleRE.FindAllSubmatch(doc, -1) {
		p, err := Parse("docs/rbac.md example "+string(m[1]), m[2])
		if err != nil {
			t.Fatalf("example %s: %v", m[1], err)
		}
		ex[string(m[1])] = p
	}
	if len(ex) != 3 {
		t.Fatalf("%d examples in docs/rbac.md, want 3", len(ex))
	}
	type c struct {
		who           Subject
		res, act, obj string
		want          bool
	}
	eng := Subject{Name: "erin", Groups: []string{"engineering"}}
	rm := Subject{Name: "rita", Groups: []string{"release-managers"}}
	both := Subject{Name: "bo", Groups: []string{"engineering", "release-managers"}}
	dev := Subject{Name: "dan", Groups: []string{"developers"}}
	devRM := Subject{Name: "di", Groups: []string{"developers", "release-managers"}}
	anyone := Subject{Name: "x"}
	admin := Subject{Name: "ada", Groups: []string{"prflow-admins"}}
	for name, cases := range map[string][]c{
		"readonly": {
			{anyone, Runs, Get, "web/prod", true}, {anyone, Audit, Get, "*", true}, {anyone, Runs, Cancel, "web/dev", false},
			{anyone, Approvals, Approve, "web/dev", false}, {admin, Runs, Cancel, "web/prod", true},
		},
		"release-managers": {
			{eng, Runs, Start, "web/dev", true}, {eng, Runs, Cancel, "api/staging", true}, {eng, Environments, Rollback, "web/staging", true},
			{eng, Runs, Start, "web/prod", false}, {eng, Environments, Rollback, "web/prod", false}, {eng, Runs, Get, "web/prod", true},
			{rm, Runs, Start, "web/prod", true}, {rm, Environments, Rollback, "web/prod", true}, {rm, Approvals, Approve, "web/prod", true},
			{rm, Runs, Start, "web/dev", false}, {both, Runs, Start, "web/prod", true}, {both, Runs, Start, "web/dev", true},
			{anyone, Runs, Start, "web/dev", false},
		},
		"developers": {
			{dev, Runs, Start, "web/dev", true}, {dev, Runs, Cancel, "web/staging", true}, {dev, Audit, Get, "*", true},
			{dev, Runs, Start, "web/prod", false}, {dev, Approvals, Approve, "web/prod", false}, {dev, Environments, Rollback, "web/prod", false},
			{dev, Runs, Get, "web/prod", true}, {rm, Runs, Cancel, "web/prod", true}, {devRM, Runs, Cancel, "web/prod", false},
		},
	} {
		for _, tc := range cases {
			if got := ex[name].Allowed(tc.who, tc.res, tc.act, tc.obj); got != tc.want {
				t.Errorf("example %s: %s %s %s %s = %v, want %v", name, tc.who, tc.act, tc.res, tc.obj, got, tc.want)
			}
		}
	}
}
