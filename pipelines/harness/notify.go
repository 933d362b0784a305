package harness

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/pipelines"
)

// Harness pipeline events and the prflow events they become.
var harnessEvents = map[string][]string{
	"AllEvents": {pipelines.EvRunStarted, pipelines.EvRunSucceeded, pipelines.EvRunFailed,
		pipelines.EvStageStarted, pipelines.EvStageSucceeded, pipelines.EvStageFailed},
	"PipelineStart":   {pipelines.EvRunStarted},
	"PipelineSuccess": {pipelines.EvRunSucceeded},
	"PipelineFailed":  {pipelines.EvRunFailed},
	"PipelineEnd":     {pipelines.EvRunSucceeded, pipelines.EvRunFailed, pipelines.EvRunCancelled},
	"StageStart":      {pipelines.EvStageStarted},
	"StageSuccess":    {pipelines.EvStageSucceeded},
	"StageFailed":     {pipelines.EvStageFailed},
}

// Harness method types and the prflow channel types they become.
var harnessMethods = map[string]string{"Slack": "slack", "Webhook": "webhook", "Email": "email"}

// secretExprRE is a whole-value Harness secret expression: <+secrets.getValue("id")>.
var secretExprRE = regexp.MustCompile(`^<\+secrets\.getValue\(\s*["']([^"']+)["']\s*\)>$`)

// methodSpec are the spec fields of the Harness methods prflow sends to.
var methodSpec = map[string][]string{"Email": {"userGroups", "recipients"}, "Slack": {"userGroups", "webhookUrl"},
	"Webhook": {"webhookUrl", "headers"}}

// notifyTarget is a channel a Harness rule is carried to, and what the workers must
// configure for it ("" when the map file named it).
type notifyTarget struct{ channel, setup string }

// notificationRules carries Harness notificationRules into native `notifications:` rules. A
// rule's channel is a *reference* to a channel of the workers' notifiers file: the URL, which
// Harness keeps in the YAML (often as a secret expression), is never copied. What prflow
// cannot resolve by itself (user groups, a rule's whole method) comes from the map file's
// notifications section. Everything a rule says that is not carried (a user group with no
// channel, MS Teams, PagerDuty, step events, unknown stages, webhook headers) is refused at
// its field, or left out with a warning when unsupported constructs are allowed; a rule the
// map file deliberately leaves without channels, and a disabled rule, are left out with a
// warning. stageIDs are the native stage ids, for forStages.
func (c *conv) notificationRules(f hfield, path string, stageIDs []string) *yaml.Node {
	n := f.v
	if n == nil {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		c.bad(n, path, "want a list of notification rules")
		return nil
	}
	nm := c.o.Map.notify()
	out := seqNode()
	for i, item := range n.Content {
		rp := itemPath(path, i)
		item = deref(item)
		rf := c.fields(item, rp, "enabled", "pipelineEvents", "notificationMethod")
		label := fmt.Sprintf("rule %d", i+1)
		ruleID, harnessID := fmt.Sprintf("notify_%d", i+1), ""
		if x := get(item, "identifier"); isScalar(x) {
			label, ruleID, harnessID = fmt.Sprintf("rule %q", x.Value), nativeID(x.Value), x.Value
		} else if x := get(item, "name"); isScalar(x) {
			label, ruleID, harnessID = fmt.Sprintf("rule %q", x.Value), nativeID(x.Value), x.Value
		}
		if e := rf["enabled"].v; isScalar(e) && e.Value == "false" {
			c.warn(item, rp, "not carried: %s is disabled in Harness", label)
			continue
		}
		// lose records what the rule says and prflow does not carry, at its field.
		lost := 0
		lose := func(at *yaml.Node, p, format string, a ...any) {
			if at == nil {
				at = item
			}
			lost++
			c.unsupported(at, p, "notification %s: %s", label, fmt.Sprintf(format, a...))
		}
		// Events: run events in one rule, each stage event entry with its own stage filter.
		type group struct {
			on     []string
			stages []string
		}
		var groups []group
		runOn := []string{}
		if ev := rf["pipelineEvents"].v; ev != nil && ev.Kind == yaml.SequenceNode {
			for j, e := range ev.Content {
				ep := itemPath(rp+".pipelineEvents", j)
				ef := c.fields(e, ep, "type", "forStages")
				t := ""
				if isScalar(ef["type"].v) {
					t = ef["type"].v.Value
				}
				mapped, ok := harnessEvents[t]
				if !ok {
					lose(orNode(ef["type"].v, e), ep+".type", "event %s (prflow has no such event)", orQuote(t))
					continue
				}
				stages, bad := c.forStages(ef["forStages"].v, stageIDs)
				if len(bad) > 0 {
					lose(ef["forStages"].v, ep+".forStages", "forStages %s (no such stage)", strings.Join(bad, ", "))
				}
				narrowed := len(stages) == 0 && len(bad) > 0 // no stage left: never every stage instead
				var runEvs, stageEvs []string
				for _, m := range mapped {
					if strings.HasPrefix(m, "stage.") {
						stageEvs = append(stageEvs, m)
					} else if !slices.Contains(runOn, m) {
						runEvs = append(runEvs, m)
					}
				}
				runOn = append(runOn, runEvs...)
				if len(stageEvs) > 0 && !narrowed {
					groups = append(groups, group{on: stageEvs, stages: stages})
				}
			}
		} else if ev != nil {
			c.bad(ev, rp+".pipelineEvents", "want a list of {type: …}")
		}
		if len(runOn) > 0 {
			groups = append([]group{{on: runOn}}, groups...)
		}
		// Targets: the map's channels for the rule, else what its method names.
		var targets []notifyTarget
		add := func(ch, setup string) {
			if !slices.ContainsFunc(targets, func(t notifyTarget) bool { return t.channel == ch }) {
				targets = append(targets, notifyTarget{ch, setup})
			}
		}
		none := false // the map gives the rule or its user groups no channel, on purpose
		if chs, ok := nm.Rules[harnessID]; ok && harnessID != "" {
			for _, ch := range chs {
				add(ch, "")
			}
			if none = len(chs) == 0; none {
				c.warn(item, rp, "not carried: %s: the mapping file %s gives it no channel", label, c.o.Map.File)
			}
		} else {
			none = c.notifyMethod(rf["notificationMethod"].v, rp+".notificationMethod", ruleID, label, nm, add, lose)
		}
		if len(targets) > 0 && len(groups) > 0 {
			var carried, chans, setups []string
			for _, g := range groups {
				carried = append(carried, strings.Join(g.on, ", "))
			}
			for _, t := range targets {
				chans = append(chans, strconv.Quote(t.channel))
				setup := t.setup
				if setup == "" {
					setup = fmt.Sprintf("channel %q (named in the mapping file %s)", t.channel, c.o.Map.File)
				} else {
					setups = append(setups, setup)
				}
				c.notes = append(c.notes, "notification channels are configured on the workers (prflow worker --notifiers): "+setup)
				for _, g := range groups {
					r := mapNode()
					on := seqNode()
					on.Style = yaml.FlowStyle
					for _, e := range g.on {
						on.Content = append(on.Content, strNode(e))
					}
					put(r, "on", on)
					if len(g.stages) > 0 {
						st := seqNode()
						st.Style = yaml.FlowStyle
						for _, s := range g.stages {
							st.Content = append(st.Content, strNode(s))
						}
						put(r, "stages", st)
					}
					put(r, "channel", strNode(t.channel))
					r.HeadComment = marker(rp, item.Line)
					out.Content = append(out.Content, r)
				}
			}
			// A channel the converter derived must be set up by hand: say which, once.
			if len(setups) > 0 {
				c.warn(item, rp, "%s carried to %s (%s); configure %s on the workers", label, strings.Join(chans, ", "),
					strings.Join(carried, "; "), strings.Join(setups, " and "))
			}
			continue
		}
		switch {
		case len(targets) > 0 && lost == 0:
			lose(orNode(rf["pipelineEvents"].v, item), rp+".pipelineEvents", "no event that prflow has")
		case len(targets) == 0 && none:
			// left out on purpose; said where the map file says so
		case len(targets) == 0 && lost == 0:
			lose(orNode(rf["notificationMethod"].v, item), rp+".notificationMethod", "it names nothing to notify")
		}
	}
	if len(out.Content) == 0 {
		return nil
	}
	return out
}

// notifyMethod reads a rule's notificationMethod, adding the channels it is carried to and
// losing what cannot be. It reports whether the map file deliberately gives the method's
// user groups no channel.
func (c *conv) notifyMethod(m *yaml.Node, mp, ruleID, label string, nm NotifyMap, add func(ch, setup string),
	lose func(at *yaml.Node, p, format string, a ...any)) (none bool) {
	if m == nil {
		lose(nil, mp, "no notificationMethod")
		return false
	}
	mf := c.fields(m, mp, "type", "spec")
	mtype := ""
	if isScalar(mf["type"].v) {
		mtype = mf["type"].v.Value
	}
	spec := deref(mf["spec"].v)
	sp := mp + ".spec"
	ctype, ok := harnessMethods[mtype]
	if !ok {
		lose(orNode(mf["type"].v, m), mp+".type", "method %s (prflow sends to Slack-compatible webhooks, signed JSON webhooks and email; "+
			"or give the rule a channel under notifications.rules in the mapping file)", orQuote(mtype))
		return false
	}
	sf := c.fields(spec, sp, methodSpec[mtype]...)
	groups := 0
	if ug := sf["userGroups"].v; ug != nil && ug.Kind != yaml.SequenceNode {
		lose(ug, sp+".userGroups", "user groups given as an expression (list them)")
	} else if ug != nil {
		for j, g := range ug.Content {
			gp := itemPath(sp+".userGroups", j)
			if !isScalar(g) {
				lose(g, gp, "a user group that is not a name")
				continue
			}
			groups++
			chs, ok := nm.group(g.Value)
			switch {
			case !ok:
				lose(g, gp, "user group %q: prflow has no user groups to notify; map it to channels of the workers' notifiers file "+
					"under notifications.userGroups in the mapping file (--harness-map), or to [] to leave it out", g.Value)
			case len(chs) == 0:
				none = true
				c.warn(g, gp, "not carried: %s to user group %q: the mapping file %s gives the group no channel", label, g.Value, c.o.Map.File)
			}
			for _, ch := range chs {
				add(ch, "")
			}
		}
	}
	switch ctype {
	case "slack", "webhook":
		if h := sf["headers"]; h.v != nil && (h.v.Kind != yaml.MappingNode || len(h.v.Content) > 0) {
			lose(h.k, sp+".headers", "custom webhook headers (a prflow webhook sends its own signed headers)")
		}
		u := sf["webhookUrl"].v
		switch {
		case !isScalar(u) || strings.TrimSpace(u.Value) == "":
			if groups == 0 {
				lose(orNode(u, m), sp+".webhookUrl", "the method names no webhookUrl")
			}
		case secretExprRE.MatchString(u.Value):
			secret := secretExprRE.FindStringSubmatch(u.Value)[1]
			if chs, ok := nm.Secrets[secret]; ok {
				for _, ch := range chs {
					add(ch, "")
				}
				if len(chs) == 0 {
					none = true
					c.warn(u, sp+".webhookUrl", "not carried: %s to secret %q: the mapping file %s gives it no channel", label, secret, c.o.Map.File)
				}
				break
			}
			ch := nativeID(secret[strings.LastIndex(secret, ".")+1:])
			setup := fmt.Sprintf("a %s channel %q whose url is the value of Harness secret %q (as env: or file:)", ctype, ch, secret)
			if ctype == "webhook" {
				setup += " and a secret for the signature"
			}
			add(ch, setup)
		default:
			setup := fmt.Sprintf("a %s channel %q whose url is the webhook URL this rule names (as env: or file:; it is not copied into the pipeline)", ctype, ruleID)
			if ctype == "webhook" {
				setup += " and a secret for the signature"
			}
			add(ruleID, setup)
		}
	case "email":
		var to []string
		if r := sf["recipients"].v; r != nil && r.Kind != yaml.SequenceNode {
			lose(r, sp+".recipients", "recipients given as an expression (list them)")
		} else if r != nil {
			for j, x := range r.Content {
				if !isScalar(x) {
					lose(x, itemPath(sp+".recipients", j), "a recipient that is not an address")
					continue
				}
				to = append(to, x.Value)
			}
		}
		if len(to) > 0 {
			add(ruleID, fmt.Sprintf("an email channel %q with smtp settings and to: %s", ruleID, strings.Join(to, ", ")))
		} else if groups == 0 && sf["recipients"].v != nil && sf["recipients"].v.Kind == yaml.SequenceNode {
			lose(orNode(sf["recipients"].v, m), sp+".recipients", "the email method names no recipients")
		}
	}
	return none
}

func orNode(n, fallback *yaml.Node) *yaml.Node {
	if n != nil {
		return n
	}
	return fallback
}

// forStages maps Harness stage identifiers to native stage ids (a matrix stage's copies
// included). Empty, AllStages or a runtime input means every stage.
func (c *conv) forStages(n *yaml.Node, stageIDs []string) (ids, bad []string) {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil, nil
	}
	for _, x := range n.Content {
		if !isScalar(x) {
			continue
		}
		v := x.Value
		if v == "AllStages" || strings.HasPrefix(v, "<+") {
			return nil, nil
		}
		id := nativeID(v)
		found := false
		for _, s := range stageIDs {
			if s == id || strings.HasPrefix(s, id+"_") && isDigits(s[len(id)+1:]) {
				ids = append(ids, s)
				found = true
			}
		}
		if !found {
			bad = append(bad, v)
		}
	}
	if len(ids) == 0 && len(bad) > 0 {
		return nil, bad
	}
	return ids, bad
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func orQuote(s string) string {
	if s == "" {
		return "(none given)"
	}
	return fmt.Sprintf("%q", s)
}
