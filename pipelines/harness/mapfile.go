package harness

import (
	"os"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/yamlconf"
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

// channelMap is a section of notifications: name: channel (or name: [channels]) entries.
// A value that is an address, a URL or a secret reference is refused: those belong in the
// workers' notifiers file, and a URL (the credential of a webhook) is not repeated.
type channelMap map[string][]string

func (cm *channelMap) UnmarshalYAMLConf(d *yamlconf.Doc, n *yaml.Node, path string) {
	var raw map[string]yaml.Node
	if n.Kind != yaml.MappingNode {
		d.ErrorAt(n, path, "want a mapping of name: channel (or name: [channels])")
		return
	}
	d.Decode(n, path, &raw)
	*cm = channelMap{}
	for k, v := range raw {
		p := yamlconf.Join(path, k)
		list := []*yaml.Node{&v}
		if v.Kind == yaml.SequenceNode {
			list = v.Content
		}
		chs := []string{}
		for _, x := range list {
			if x.Kind != yaml.ScalarNode || x.Tag == "!!null" {
				d.ErrorAt(x, p, "want a channel name of the workers' notifiers file, or a list of them")
				continue
			}
			switch s := x.Value; {
			case strings.Contains(s, "://"):
				d.ErrorAt(x, p, "a URL here (not repeated: a webhook URL is a secret): define a channel with url: env:… or file:… in the workers' notifiers file (prflow worker --notifiers) and give its name here")
			case strings.HasPrefix(s, "env:") || strings.HasPrefix(s, "file:") || strings.Contains(s, "<+"):
				d.ErrorAt(x, p, "%q is a secret reference: it belongs in the workers' notifiers file (prflow worker --notifiers); give the channel's name here", s)
			case strings.Contains(s, "@"):
				d.ErrorAt(x, p, "%q is an address: define an email channel with to: [%s] in the workers' notifiers file (prflow worker --notifiers) and give its name here", s, s)
			case !channelRE.MatchString(s):
				d.ErrorAt(x, p, "%q is not a channel name (letters, digits, - and _, starting with a letter, at most 63)", s)
			default:
				chs = append(chs, s)
			}
		}
		(*cm)[k] = chs
	}
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
	Name  string `yaml:"name"`
	Agent string `yaml:"agent"`
	Line  int    `yaml:"-"`
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

// namedValues is a mapping of name: value kept in file order, the values as written.
type namedValues []NamedValue

func (nv *namedValues) UnmarshalYAMLConf(d *yamlconf.Doc, n *yaml.Node, path string) {
	if n.Kind != yaml.MappingNode {
		d.ErrorAt(n, path, "want a mapping of name: value")
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		*nv = append(*nv, NamedValue{Name: n.Content[i].Value, Value: n.Content[i+1]})
	}
}

// The map file as written; ParseMap checks it and builds the Map.
type (
	rawMap struct {
		Services          map[string]*rawService   `yaml:"services" want:"a mapping of identifier: {...}"`
		Environments      map[string]*rawEnv       `yaml:"environments" want:"a mapping of identifier: {...}"`
		GitOpsClusters    map[string]*ClusterMap   `yaml:"gitOpsClusters" want:"a mapping of identifier: {...}"`
		Agents            map[string]string        `yaml:"agents" want:"a mapping of Harness agent identifier: prflow agent id"`
		Notifications     *rawNotify               `yaml:"notifications"`
		MonitoredServices map[string]*rawMonitored `yaml:"monitoredServices" want:"a mapping of identifier: {...}"`
	}
	rawService struct {
		ReleaseRepo    *RepoMap `yaml:"releaseRepo"`
		DeploymentRepo *struct {
			ApplicationSet string `yaml:"applicationSet"`
			Selector       string `yaml:"selector"`
		} `yaml:"deploymentRepo"`
		Variables namedValues       `yaml:"variables"`
		Artifacts map[string]string `yaml:"artifacts" want:"a mapping of name: value"`
	}
	rawEnv struct {
		Name           string      `yaml:"name"`
		Group          string      `yaml:"group"`
		GitOpsClusters []string    `yaml:"gitOpsClusters" want:"a list of GitOps cluster identifiers"`
		Variables      namedValues `yaml:"variables"`
		Overrides      namedValues `yaml:"overrides"`
	}
	rawNotify struct {
		UserGroups channelMap `yaml:"userGroups"`
		Secrets    channelMap `yaml:"secrets"`
		Rules      channelMap `yaml:"rules"`
	}
	rawMonitored struct {
		Metrics []*yaml.Node `yaml:"metrics" want:"a list of metrics ({name, provider, query, failureCondition, …}: the Verify step's)"`
	}
)

// ParseMap parses a mapping file; every problem names file:line:col and the field.
func ParseMap(file string, src []byte) (*Map, error) {
	m := &Map{File: file, Services: map[string]*ServiceMap{}, Environments: map[string]*EnvMap{}, Clusters: map[string]ClusterMap{}, Agents: map[string]string{}}
	var raw rawMap
	d, err := yamlconf.Load(file, src, &raw, "services, environments, gitOpsClusters, agents, notifications or monitoredServices")
	if d == nil {
		return nil, pipelines.FromYAMLConf(err)
	}
	// required reports an empty string that the file sets (or does not) at path.
	required := func(path, v string) string {
		if v == "" && !d.Bad(path) {
			d.Errorf(path, "required")
		}
		return v
	}
	line := func(path string) int {
		if k := d.Key(path); k != nil {
			return k.Line
		}
		return 0
	}
	if n := raw.Notifications; n != nil {
		m.Notify = NotifyMap{UserGroups: n.UserGroups, Secrets: n.Secrets, Rules: n.Rules}
	}
	for k, a := range raw.Agents {
		m.Agents[k] = required("agents."+k, a)
	}
	for k, ms := range raw.MonitoredServices {
		p := "monitoredServices." + k
		if ms == nil || len(ms.Metrics) == 0 {
			if !d.Bad(p) && !d.Bad(p+".metrics") {
				d.Errorf(p+".metrics", "want a list of metrics ({name, provider, query, failureCondition, …}: the Verify step's)")
			}
			continue
		}
		if m.MonitoredServices == nil {
			m.MonitoredServices = map[string][]*yaml.Node{}
		}
		for i, x := range ms.Metrics {
			if x.Kind != yaml.MappingNode {
				d.Errorf(yamlconf.Index(p+".metrics", i), "want a mapping {name, provider, query, …}")
			}
		}
		m.MonitoredServices[k] = ms.Metrics
	}
	for k, c := range raw.GitOpsClusters {
		p := "gitOpsClusters." + k
		if c == nil {
			c = &ClusterMap{}
		}
		cm := ClusterMap{Name: c.Name, Agent: c.Agent, Line: line(p)}
		if !d.Bad(p) {
			required(p+".agent", c.Agent)
		}
		if cm.Name == "" {
			cm.Name = k
		}
		m.Clusters[k] = cm
	}
	for k, r := range raw.Environments {
		p := "environments." + k
		if r == nil {
			r = &rawEnv{}
		}
		e := &EnvMap{Ref: k, Name: r.Name, Group: r.Group, Variables: r.Variables, Overrides: r.Overrides, Line: line(p)}
		if e.Name == "" {
			e.Name = k
		}
		for i, id := range r.GitOpsClusters {
			cp := yamlconf.Index(p+".gitOpsClusters", i)
			if _, ok := m.Clusters[id]; id != "" && !ok {
				d.Errorf(cp, "unknown GitOps cluster %q (declare it under gitOpsClusters:)", id)
			}
			required(cp, id)
			e.Clusters = append(e.Clusters, id)
		}
		m.Environments[k] = e
	}
	for k, r := range raw.Services {
		p := "services." + k
		if r == nil {
			r = &rawService{}
		}
		s := &ServiceMap{Ref: k, Variables: r.Variables, VariablesSet: d.Has(p + ".variables"), Artifacts: r.Artifacts, Line: line(p)}
		if rr := r.ReleaseRepo; rr != nil {
			s.ReleaseRepo = rr
			for _, f := range []struct{ name, v string }{{"connector", rr.Connector}, {"repo", rr.Repo}, {"path", rr.Path}} {
				required(p+".releaseRepo."+f.name, f.v)
			}
		}
		if dr := r.DeploymentRepo; dr != nil {
			s.AppSet, s.AppSelector = dr.ApplicationSet, dr.Selector
			if s.AppSet == "" && s.AppSelector == "" && !d.Bad(p+".deploymentRepo") {
				d.Errorf(p+".deploymentRepo", "give applicationSet (the ApplicationSet's name) or selector (a label selector)")
			}
		}
		m.Services[k] = s
	}
	if err := d.Err(); err != nil {
		return nil, pipelines.FromYAMLConf(err)
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
