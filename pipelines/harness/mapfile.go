package harness

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps/spelling"
)

// Map holds what Harness keeps in its SaaS and a pipeline only refers to: services (their
// release repo and ApplicationSet), environments and GitOps clusters.
type Map struct {
	File         string
	Services     map[string]*ServiceMap
	Environments map[string]*EnvMap
	Clusters     map[string]ClusterMap // by Harness GitOps cluster identifier
	// Agents maps Harness GitOps agent identifiers (as pipelines name them in
	// gitOpsClusters[].agentIdentifier and applicationsList[].agentId) to prflow agent ids.
	Agents map[string]string
	Notify NotifyMap
	// MonitoredServices are the health sources of Harness monitored services (by the ref a
	// Verify step names, or, for a Default monitored service, by the stage's serviceRef): the
	// native Verify step's metrics, each a mapping of its fields (name, provider, query, …).
	MonitoredServices map[string][]*yaml.Node
}

// NotifyMap names the prflow notification channels (channels of the workers' notifiers
// file) that stand for the notification targets a Harness pipeline names and prflow cannot
// resolve by itself. The map holds channel names only: addresses, webhook URLs and their
// secrets stay in the notifiers file. An empty list leaves the target out on purpose.
type NotifyMap struct {
	UserGroups map[string][]string // Harness user group (as a rule names it) → channels
	Secrets    map[string][]string // Harness secret a webhookUrl reads (<+secrets.getValue("id")>) → channels
	Rules      map[string][]string // rule identifier → channels, in place of its whole method
}

// notify is the map's notifications section (empty without a map).
func (m *Map) notify() NotifyMap {
	if m == nil {
		return NotifyMap{}
	}
	return m.Notify
}

// group is the channels of a Harness user group: by its name as written, else without its
// account./org. scope.
func (n NotifyMap) group(g string) ([]string, bool) {
	if chs, ok := n.UserGroups[g]; ok {
		return chs, true
	}
	for _, pre := range []string{"account.", "org."} {
		if s, ok := strings.CutPrefix(g, pre); ok {
			chs, ok := n.UserGroups[s]
			return chs, ok
		}
	}
	return nil, false
}

// channelRE is a channel name (the native loader's id rule).
var channelRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,62}$`)

// channels reads name: channel (or name: [channels]) entries of the notifications section.
// A value that is an address, a URL or a secret reference is refused: those belong in the
// workers' notifiers file, and a URL (the credential of a webhook) is not repeated.
func (r *mapReader) channels(n *yaml.Node, path string) map[string][]string {
	if n == nil {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		r.errf(n, path, "want a mapping of name: channel (or name: [channels])")
		return nil
	}
	out := map[string][]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := path + "." + k.Value
		if _, dup := out[k.Value]; dup {
			r.errf(k, p, "duplicate key")
			continue
		}
		list := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			list = v.Content
		}
		chs := []string{}
		for _, x := range list {
			if x.Kind != yaml.ScalarNode || x.Tag == "!!null" {
				r.errf(x, p, "want a channel name of the workers' notifiers file, or a list of them")
				continue
			}
			switch s := x.Value; {
			case strings.Contains(s, "://"):
				r.errf(x, p, "a URL here (not repeated: a webhook URL is a secret): define a channel with url: env:… or file:… in the workers' notifiers file (prflow worker --notifiers) and give its name here")
			case strings.HasPrefix(s, "env:") || strings.HasPrefix(s, "file:") || strings.Contains(s, "<+"):
				r.errf(x, p, "%q is a secret reference: it belongs in the workers' notifiers file (prflow worker --notifiers); give the channel's name here", s)
			case strings.Contains(s, "@"):
				r.errf(x, p, "%q is an address: define an email channel with to: [%s] in the workers' notifiers file (prflow worker --notifiers) and give its name here", s, s)
			case !channelRE.MatchString(s):
				r.errf(x, p, "%q is not a channel name (letters, digits, - and _, starting with a letter, at most 63)", s)
			default:
				chs = append(chs, s)
			}
		}
		out[k.Value] = chs
	}
	return out
}

// ServiceMap is one Harness service (serviceRef).
type ServiceMap struct {
	Ref          string
	ReleaseRepo  *RepoMap
	AppSet       string // deploymentRepo.applicationSet: the ApplicationSet FetchLinkedApps looks for
	AppSelector  string // deploymentRepo.selector: or a label selector
	Variables    []NamedValue
	VariablesSet bool
	// Artifacts are the values of the service's artifact runtime inputs (primaryArtifactRef,
	// a source's tag…), by field name; the pipeline's serviceInputs <+input> fields default to them.
	Artifacts map[string]string
	Line      int
}

// RepoMap is a release repo: connector (from the worker's connectors file), repo, branch and
// the config file path template (<+env.name>, <+cluster.name>).
type RepoMap struct {
	Connector, Repo, Branch, Path string
}

// EnvMap is one Harness environment (environmentRef).
type EnvMap struct {
	Ref       string
	Name      string // the environment's name (folder names in path templates use it)
	Group     string
	Clusters  []string // GitOps cluster identifiers linked to it
	Variables []NamedValue
	Overrides []NamedValue
	Line      int
}

// ClusterMap is a GitOps cluster: its name and the prflow agent that reports on it.
type ClusterMap struct {
	Name, Agent string
	Line        int
}

// NamedValue is a variable in file order.
type NamedValue struct {
	Name  string
	Value *yaml.Node
}

// LoadMap reads a mapping file.
func LoadMap(path string) (*Map, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseMap(path, src)
}

type mapReader struct {
	file string
	errs []pipelines.FieldError
}

func (r *mapReader) errf(n *yaml.Node, path, format string, a ...any) {
	fe := pipelines.FieldError{File: r.file, Path: path, Msg: fmt.Sprintf(format, a...)}
	if n != nil {
		fe.Line, fe.Col = n.Line, n.Column
	}
	r.errs = append(r.errs, fe)
}

// fields returns a mapping's values by key, reporting unknown keys.
func (r *mapReader) fields(n *yaml.Node, path string, allowed ...string) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	if n == nil {
		return out
	}
	if n.Kind != yaml.MappingNode {
		r.errf(n, path, "want a mapping")
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		for v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		if !contains(allowed, k.Value) {
			hint := ""
			if s := spelling.Closest(k.Value, allowed); s != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", s)
			}
			r.errf(k, join(path, k.Value), "unknown field%s (allowed: %s)", hint, strings.Join(allowed, ", "))
			continue
		}
		if _, dup := out[k.Value]; dup {
			r.errf(k, join(path, k.Value), "duplicate key")
			continue
		}
		out[k.Value] = v
	}
	return out
}

func (r *mapReader) str(n *yaml.Node, path string, required bool, parent *yaml.Node) string {
	if n == nil {
		if required {
			r.errf(parent, path, "required")
		}
		return ""
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		r.errf(n, path, "want a string")
		return ""
	}
	if required && n.Value == "" {
		r.errf(n, path, "required")
	}
	return n.Value
}

func (r *mapReader) vars(n *yaml.Node, path string) []NamedValue {
	if n == nil {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		r.errf(n, path, "want a mapping of name: value")
		return nil
	}
	var out []NamedValue
	for i := 0; i+1 < len(n.Content); i += 2 {
		out = append(out, NamedValue{Name: n.Content[i].Value, Value: n.Content[i+1]})
	}
	return out
}

// ParseMap parses a mapping file; every problem names file:line and the field.
func ParseMap(file string, src []byte) (*Map, error) {
	r := &mapReader{file: file}
	m := &Map{File: file, Services: map[string]*ServiceMap{}, Environments: map[string]*EnvMap{}, Clusters: map[string]ClusterMap{}, Agents: map[string]string{}}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(src)).Decode(&doc); err != nil {
		return nil, pipelines.SyntaxError(file, src, err)
	}
	if len(doc.Content) == 0 {
		return nil, &pipelines.LoadError{Errs: []pipelines.FieldError{{File: file, Msg: "empty file"}}}
	}
	root := r.fields(doc.Content[0], "", "services", "environments", "gitOpsClusters", "agents", "notifications", "monitoredServices")
	if nf := root["notifications"]; nf != nil {
		f := r.fields(nf, "notifications", "userGroups", "secrets", "rules")
		m.Notify = NotifyMap{UserGroups: r.channels(f["userGroups"], "notifications.userGroups"),
			Secrets: r.channels(f["secrets"], "notifications.secrets"), Rules: r.channels(f["rules"], "notifications.rules")}
	}
	eachEntry := func(n *yaml.Node, path string, fn func(k, v *yaml.Node, p string)) {
		if n == nil {
			return
		}
		if n.Kind != yaml.MappingNode {
			r.errf(n, path, "want a mapping of identifier: {...}")
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			fn(n.Content[i], n.Content[i+1], path+"."+n.Content[i].Value)
		}
	}
	if a := root["agents"]; a != nil {
		if a.Kind != yaml.MappingNode {
			r.errf(a, "agents", "want a mapping of Harness agent identifier: prflow agent id")
		} else {
			for i := 0; i+1 < len(a.Content); i += 2 {
				k := a.Content[i]
				if _, dup := m.Agents[k.Value]; dup {
					r.errf(k, "agents."+k.Value, "duplicate key")
					continue
				}
				m.Agents[k.Value] = r.str(a.Content[i+1], "agents."+k.Value, true, a)
			}
		}
	}
	eachEntry(root["monitoredServices"], "monitoredServices", func(k, v *yaml.Node, p string) {
		f := r.fields(v, p, "metrics")
		ms := f["metrics"]
		if ms == nil || ms.Kind != yaml.SequenceNode || len(ms.Content) == 0 {
			r.errf(v, p+".metrics", "want a list of metrics ({name, provider, query, failureCondition, …}: the Verify step's)")
			return
		}
		for i, x := range ms.Content {
			if x.Kind != yaml.MappingNode {
				r.errf(x, fmt.Sprintf("%s.metrics[%d]", p, i), "want a mapping {name, provider, query, …}")
				return
			}
		}
		if m.MonitoredServices == nil {
			m.MonitoredServices = map[string][]*yaml.Node{}
		}
		m.MonitoredServices[k.Value] = ms.Content
	})
	eachEntry(root["gitOpsClusters"], "gitOpsClusters", func(k, v *yaml.Node, p string) {
		f := r.fields(v, p, "name", "agent")
		c := ClusterMap{Name: r.str(f["name"], p+".name", false, v), Agent: r.str(f["agent"], p+".agent", true, v), Line: k.Line}
		if c.Name == "" {
			c.Name = k.Value
		}
		m.Clusters[k.Value] = c
	})
	eachEntry(root["environments"], "environments", func(k, v *yaml.Node, p string) {
		f := r.fields(v, p, "name", "group", "gitOpsClusters", "variables", "overrides")
		e := &EnvMap{Ref: k.Value, Name: r.str(f["name"], p+".name", false, v), Group: r.str(f["group"], p+".group", false, v),
			Variables: r.vars(f["variables"], p+".variables"), Overrides: r.vars(f["overrides"], p+".overrides"), Line: k.Line}
		if e.Name == "" {
			e.Name = k.Value
		}
		if cl := f["gitOpsClusters"]; cl != nil {
			if cl.Kind != yaml.SequenceNode {
				r.errf(cl, p+".gitOpsClusters", "want a list of GitOps cluster identifiers")
			}
			for i, c := range cl.Content {
				id := r.str(c, fmt.Sprintf("%s.gitOpsClusters[%d]", p, i), true, cl)
				if _, ok := m.Clusters[id]; id != "" && !ok {
					r.errf(c, fmt.Sprintf("%s.gitOpsClusters[%d]", p, i), "unknown GitOps cluster %q (declare it under gitOpsClusters:)", id)
				}
				e.Clusters = append(e.Clusters, id)
			}
		}
		m.Environments[k.Value] = e
	})
	eachEntry(root["services"], "services", func(k, v *yaml.Node, p string) {
		f := r.fields(v, p, "releaseRepo", "deploymentRepo", "variables", "artifacts")
		s := &ServiceMap{Ref: k.Value, Variables: r.vars(f["variables"], p+".variables"), VariablesSet: f["variables"] != nil, Line: k.Line}
		if a := f["artifacts"]; a != nil {
			s.Artifacts = map[string]string{}
			for _, nv := range r.vars(a, p+".artifacts") {
				s.Artifacts[nv.Name] = r.str(nv.Value, p+".artifacts."+nv.Name, false, a)
			}
		}
		if rr := f["releaseRepo"]; rr != nil {
			rf := r.fields(rr, p+".releaseRepo", "connector", "repo", "branch", "path")
			s.ReleaseRepo = &RepoMap{
				Connector: r.str(rf["connector"], p+".releaseRepo.connector", true, rr),
				Repo:      r.str(rf["repo"], p+".releaseRepo.repo", true, rr),
				Branch:    r.str(rf["branch"], p+".releaseRepo.branch", false, rr),
				Path:      r.str(rf["path"], p+".releaseRepo.path", true, rr),
			}
		}
		if dr := f["deploymentRepo"]; dr != nil {
			df := r.fields(dr, p+".deploymentRepo", "applicationSet", "selector")
			s.AppSet = r.str(df["applicationSet"], p+".deploymentRepo.applicationSet", false, dr)
			s.AppSelector = r.str(df["selector"], p+".deploymentRepo.selector", false, dr)
			if s.AppSet == "" && s.AppSelector == "" {
				r.errf(dr, p+".deploymentRepo", "give applicationSet (the ApplicationSet's name) or selector (a label selector)")
			}
		}
		m.Services[k.Value] = s
	})
	if len(r.errs) > 0 {
		sort.SliceStable(r.errs, func(i, j int) bool { return r.errs[i].Line < r.errs[j].Line })
		return nil, &pipelines.LoadError{Errs: r.errs}
	}
	return m, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// agent maps a Harness agent identifier to a prflow agent id (itself when not mapped).
func (m *Map) agent(harnessID string) (string, bool) {
	if m == nil {
		return harnessID, false
	}
	if a, ok := m.Agents[harnessID]; ok {
		return a, true
	}
	return harnessID, false
}
