// Package rbac decides what a caller may do: Argo CD-style policy lines evaluated by Casbin.
//
// A policy file (prflow server --rbac FILE) is YAML with two keys, as Argo CD's argocd-rbac-cm:
//
//	policy.default: role:readonly      # the role every caller has (optional)
//	policy.csv: |
//	  p, role:release, runs, *, web/prod, allow
//	  p, role:dev, *, *, */prod, deny
//	  g, release-managers, role:release
//
// A p line is "p, SUBJECT, RESOURCE, ACTION, OBJECT[, allow|deny]": SUBJECT is a user, a group
// or a role:NAME; OBJECT is PIPELINE/ENV with globs (gobwas/glob, "*" crosses "/"). A g line
// "g, USER-OR-GROUP, role:NAME" gives a role. A deny from any of the caller's subjects (their
// name, their groups, the roles of both, the default role) wins over every allow.
package rbac

import (
	"encoding/csv"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/casbin/casbin/v2"
	"github.com/casbin/casbin/v2/model"
	"github.com/gobwas/glob"
	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/yamlconf"
)

// Resources and the actions each one takes.
const (
	Runs          = "runs"
	Approvals     = "approvals"
	Interventions = "interventions"
	Environments  = "environments"
	Pipelines     = "pipelines"
	Audit         = "audit"

	Get      = "get"
	Start    = "start"
	Cancel   = "cancel"
	Approve  = "approve"
	Rollback = "rollback"
	Retry    = "retry"
)

// Actions lists, per resource, the actions a request can ask for (docs/rbac.md says what each
// one allows). A p line naming another action of a resource is refused: it would never match.
var Actions = map[string][]string{
	Runs:          {Get, Start, Cancel, Retry},
	Approvals:     {Approve},
	Interventions: {Approve},
	Environments:  {Get, Rollback},
	Pipelines:     {Get},
	Audit:         {Get},
}

// Resources are the resources in the order the docs list them.
var Resources = []string{Runs, Approvals, Interventions, Environments, Pipelines, Audit}

// Built-in roles, as Argo CD's: readonly may get everything, admin may do everything.
const (
	RoleReadonly = "role:readonly"
	RoleAdmin    = "role:admin"
)

var builtin = [][]string{
	{RoleAdmin, "*", "*", "*", "allow"},
}

func init() {
	for _, r := range Resources {
		if slices.Contains(Actions[r], Get) {
			builtin = append(builtin, []string{RoleReadonly, r, Get, "*", "allow"})
		}
	}
}

// The Casbin model: the request's subject is the caller's whole subject set (see subjects),
// matched by subjectIn; objects match by glob; a deny anywhere wins.
const modelText = `
[request_definition]
r = sub, res, act, obj

[policy_definition]
p = sub, res, act, obj, eft

[role_definition]
g = _, _

[policy_effect]
e = some(where (p.eft == allow)) && !some(where (p.eft == deny))

[matchers]
m = subjectIn(r.sub, p.sub) && (p.res == "*" || r.res == p.res) && (p.act == "*" || r.act == p.act) && objectMatch(r.obj, p.obj)
`

// Subject is who asks: a user and their groups (controller.User's Name and Groups).
type Subject struct {
	Name   string
	Groups []string
}

func (s Subject) String() string {
	if len(s.Groups) == 0 {
		return s.Name
	}
	return s.Name + " (groups " + strings.Join(s.Groups, ", ") + ")"
}

// Policy is one loaded policy; it never changes after Parse, so any number of requests may
// use it at once.
type Policy struct {
	enf    *casbin.SyncedEnforcer
	def    string // the default role, "" for none
	open   bool   // everyone is admin (no policy file)
	Source string // the file it came from, for messages
	globs  sync.Map
	Lines  []Line // the policy's lines as written (tests, the reload log)

	// decisions caches answers (the policy never changes; a reload makes a new Policy): a
	// Casbin evaluation costs tens of microseconds and a list asks once per run.
	decisions sync.Map
	cached    atomic.Int64
}

// Line is one policy line and where it was written.
type Line struct {
	File   string
	Line   int
	Fields []string
}

// Open is the policy of a server without --rbac: every authenticated caller is admin.
func Open() *Policy {
	p, err := build("(no --rbac: everyone is admin)", RoleAdmin, nil, nil)
	if err != nil {
		panic(err) // the built-in policy is fixed; a failure here is a bug
	}
	p.open = true
	return p
}

// IsOpen reports whether p is the policy of a server without --rbac.
func (p *Policy) IsOpen() bool { return p.open }

// Default is the role every caller has ("" for none).
func (p *Policy) Default() string { return p.def }

// LineError is a problem with one line of a policy file: file:line[:col]: [field: ]what.
type LineError = yamlconf.Error

// Parse reads a policy file's content; every problem is reported as a *LineError (in a
// yamlconf.Errors).
func Parse(file string, data []byte) (*Policy, error) {
	d, err := yamlconf.Parse(file, data)
	if err != nil {
		return nil, err
	}
	const want = "a mapping with policy.csv (and optionally policy.default)"
	if d.Root == nil || d.Root.Kind != yaml.MappingNode {
		d.ErrorAt(d.Root, "", "want %s", want)
		return nil, d.Err()
	}
	var doc struct {
		Default string     `yaml:"policy.default" want:"a role name like role:readonly"`
		CSV     *yaml.Node `yaml:"policy.csv"`
	}
	d.Decode(d.Root, "", &doc)
	errf := func(line int, format string, args ...any) {
		d.ErrorAt(&yaml.Node{Line: line}, "", format, args...)
	}
	def := strings.TrimSpace(doc.Default)
	csvNode := doc.CSV
	if v := csvNode; v != nil {
		switch {
		case v.Kind != yaml.ScalarNode:
			d.Errorf("policy.csv", "want the policy lines as a block (policy.csv: |)")
			csvNode = nil
		case strings.Contains(strings.TrimRight(v.Value, "\n"), "\n") && v.Style != yaml.LiteralStyle:
			d.Errorf("policy.csv", "write the lines as a literal block (policy.csv: |) so that each keeps its line")
			csvNode = nil
		}
	}
	if !d.Has("policy.csv") && !d.Failed() {
		errf(d.Root.Line, "policy.csv is missing: without lines nobody but the default role may do anything")
	}
	var lines []Line
	if csvNode != nil {
		first := csvNode.Line
		if csvNode.Style == yaml.LiteralStyle {
			first++ // the lines start below "policy.csv: |"
		}
		for i, text := range strings.Split(csvNode.Value, "\n") {
			text = strings.TrimSpace(text)
			if text == "" || strings.HasPrefix(text, "#") {
				continue
			}
			// CSV, as Argo CD's policy.csv: a glob with a comma ({a,b}) is quoted.
			cr := csv.NewReader(strings.NewReader(text))
			cr.TrimLeadingSpace = true
			fields, err := cr.Read()
			if err != nil {
				errf(first+i, "not a CSV line: %v", err)
				continue
			}
			for j := range fields {
				fields[j] = strings.TrimSpace(fields[j])
			}
			lines = append(lines, Line{File: file, Line: first + i, Fields: fields})
		}
	}
	var ps, gs [][]string
	roles := map[string]bool{RoleAdmin: true, RoleReadonly: true}
	for _, l := range lines {
		if l.Fields[0] == "p" && len(l.Fields) > 1 {
			roles[l.Fields[1]] = true
		}
	}
	for _, l := range lines {
		f := l.Fields
		if slices.Contains(f, "") {
			errf(l.Line, "empty field in %q", strings.Join(f, ", "))
			continue
		}
		switch f[0] {
		case "p":
			if len(f) != 5 && len(f) != 6 {
				errf(l.Line, "want p, SUBJECT, RESOURCE, ACTION, PIPELINE/ENV[, allow|deny], got %d fields", len(f))
				continue
			}
			if len(f) == 5 {
				f = append(f, "allow")
			}
			if msg := checkP(f[2], f[3], f[4], f[5]); msg != "" {
				errf(l.Line, "%s", msg)
				continue
			}
			ps = append(ps, f[1:])
		case "g":
			if len(f) != 3 {
				errf(l.Line, "want g, USER-OR-GROUP, role:NAME, got %d fields", len(f))
				continue
			}
			if !strings.HasPrefix(f[2], "role:") {
				errf(l.Line, "g gives a role: want role:NAME as the third field, got %q", f[2])
				continue
			}
			if !roles[f[2]] {
				errf(l.Line, "%s has no p line (and is not role:readonly or role:admin)", f[2])
				continue
			}
			gs = append(gs, f[1:])
		default:
			errf(l.Line, "unknown line kind %q: want p (a permission) or g (a role)", f[0])
		}
	}
	if def != "" && !roles[def] {
		d.Errorf("policy.default", "%s has no p line (and is not role:readonly or role:admin)", def)
	}
	if err := d.Err(); err != nil {
		return nil, err
	}
	p, err := build(file, def, ps, gs)
	if err != nil {
		return nil, yamlconf.Errors{{File: file, Msg: err.Error()}}
	}
	p.Lines = lines
	return p, nil
}

// checkP checks a p line's resource, action, object and effect; "" when it is fine.
func checkP(res, act, obj, eft string) string {
	if res != "*" {
		acts, ok := Actions[res]
		if !ok {
			return fmt.Sprintf("unknown resource %q (known: %s, or *)", res, strings.Join(Resources, ", "))
		}
		if act != "*" && !slices.Contains(acts, act) {
			return fmt.Sprintf("resource %s has no action %q (its actions: %s, or *)", res, act, strings.Join(acts, ", "))
		}
	} else if act != "*" && !knownAction(act) {
		return fmt.Sprintf("unknown action %q (known: get, start, cancel, approve, rollback, retry, or *)", act)
	}
	if _, err := glob.Compile(obj); err != nil {
		return fmt.Sprintf("object %q is not a valid glob: %v", obj, err)
	}
	if obj != "*" && !strings.Contains(obj, "/") {
		return fmt.Sprintf("object %q: want PIPELINE/ENV (globs allowed: web/prod, */prod, web/*, *)", obj)
	}
	if eft != "allow" && eft != "deny" {
		return fmt.Sprintf("effect %q: want allow or deny", eft)
	}
	return ""
}

func knownAction(a string) bool {
	for _, acts := range Actions {
		if slices.Contains(acts, a) {
			return true
		}
	}
	return false
}

func build(file, def string, ps, gs [][]string) (*Policy, error) {
	m, err := model.NewModelFromString(modelText)
	if err != nil {
		return nil, err
	}
	enf, err := casbin.NewSyncedEnforcer(m)
	if err != nil {
		return nil, err
	}
	p := &Policy{enf: enf, def: def, Source: file}
	enf.AddFunction("subjectIn", func(args ...any) (any, error) {
		set, _ := args[0].(*subjectSet)
		sub, _ := args[1].(string)
		return set != nil && set.has(sub), nil
	})
	enf.AddFunction("objectMatch", func(args ...any) (any, error) {
		obj, _ := args[0].(string)
		pat, _ := args[1].(string)
		return p.match(pat, obj), nil
	})
	all := append(slices.Clone(builtin), ps...)
	if _, err := enf.AddPolicies(all); err != nil {
		return nil, err
	}
	if len(gs) > 0 {
		if _, err := enf.AddGroupingPolicies(gs); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// match reports whether obj matches the glob pat; globs are compiled once per policy.
func (p *Policy) match(pat, obj string) bool {
	if pat == "*" || pat == obj {
		return true
	}
	g, ok := p.globs.Load(pat)
	if !ok {
		c, err := glob.Compile(pat)
		if err != nil {
			return false // refused at load; never here
		}
		g, _ = p.globs.LoadOrStore(pat, c)
	}
	return g.(*glob.Pattern).Match(obj)
}

// subjectSet is the caller's name, groups, their roles (through g lines) and the default role.
type subjectSet struct{ names []string }

func (s *subjectSet) has(n string) bool { return slices.Contains(s.names, n) }

func (p *Policy) subjects(s Subject) *subjectSet {
	set := &subjectSet{}
	add := func(n string) {
		if n != "" && !slices.Contains(set.names, n) {
			set.names = append(set.names, n)
		}
	}
	for _, n := range append([]string{s.Name}, s.Groups...) {
		add(n)
		roles, _ := p.enf.GetImplicitRolesForUser(n)
		for _, r := range roles {
			add(r)
		}
	}
	if p.def != "" {
		add(p.def)
		roles, _ := p.enf.GetImplicitRolesForUser(p.def)
		for _, r := range roles {
			add(r)
		}
	}
	return set
}

// Allowed reports whether s may take action on resource for object (PIPELINE/ENV, or * for a
// request about no particular pipeline).
func (p *Policy) Allowed(s Subject, resource, action, object string) bool {
	if s.Name == "" {
		return false
	}
	key := strings.Join([]string{s.Name, strings.Join(s.Groups, "\x01"), resource, action, object}, "\x00")
	if v, ok := p.decisions.Load(key); ok {
		return v.(bool)
	}
	ok, err := p.enf.Enforce(p.subjects(s), resource, action, object)
	allowed := err == nil && ok
	if err == nil && p.cached.Add(1) <= maxCached {
		p.decisions.Store(key, allowed)
	}
	return allowed
}

// maxCached bounds the decision cache (objects come from requests).
const maxCached = 100_000

// Denied is the answer to a request the policy refuses; its message names who, what and
// which object.
type Denied struct {
	Subject  Subject
	Resource string
	Action   string
	Object   string
}

func (d *Denied) Error() string {
	return fmt.Sprintf("permission denied: %s may not %s %s %s (rbac: %s, %s, %s)", d.Subject, d.Action, d.Resource, d.Object, d.Resource, d.Action, d.Object)
}

// Check is Allowed as an error: nil, or a *Denied.
func (p *Policy) Check(s Subject, resource, action, object string) error {
	if p.Allowed(s, resource, action, object) {
		return nil
	}
	return &Denied{Subject: s, Resource: resource, Action: action, Object: object}
}

// Object is the object of a request about pipeline's environment env ("" for a stage that
// deploys nowhere).
func Object(pipeline, env string) string { return pipeline + "/" + env }
