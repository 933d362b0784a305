package harness

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

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

// notificationRules carries Harness notificationRules into native `notifications:` rules. A
// rule's channel is a *reference*: the URL, which Harness keeps in the YAML (often as a secret
// expression), is never copied; each rule is reported once at its line, saying which channel
// the workers' notifiers file must define and with what, and what could not be carried
// (MS Teams, PagerDuty, user groups, step events, paused pipelines, disabled rules).
// stageIDs are the native stage ids, for forStages.
func (c *conv) notificationRules(f hfield, path string, stageIDs []string) *yaml.Node {
	n := f.v
	if n == nil {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		c.bad(n, path, "want a list of notification rules")
		return nil
	}
	out := seqNode()
	for i, item := range n.Content {
		rp := itemPath(path, i)
		item = deref(item)
		rf := c.fields(item, rp, "enabled", "pipelineEvents", "notificationMethod")
		label := fmt.Sprintf("rule %d", i+1)
		ruleID := fmt.Sprintf("notify_%d", i+1)
		if x := get(item, "identifier"); isScalar(x) {
			label, ruleID = fmt.Sprintf("rule %q", x.Value), nativeID(x.Value)
		} else if x := get(item, "name"); isScalar(x) {
			label, ruleID = fmt.Sprintf("rule %q", x.Value), nativeID(x.Value)
		}
		if e := rf["enabled"].v; isScalar(e) && e.Value == "false" {
			c.warn(item, rp, "not carried: %s is disabled in Harness", label)
			continue
		}
		var carried, lost []string
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
					lost = append(lost, fmt.Sprintf("event %s (prflow has no such event)", orQuote(t)))
					continue
				}
				stages, bad := c.forStages(ef["forStages"].v, stageIDs)
				if len(bad) > 0 {
					lost = append(lost, fmt.Sprintf("forStages %s (no such stage)", strings.Join(bad, ", ")))
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
		// The method: a channel reference and what the workers must configure for it.
		channel, setup := "", ""
		mf := map[string]hfield{}
		mtype := ""
		if m := rf["notificationMethod"].v; m != nil {
			mf = c.fields(m, rp+".notificationMethod", "type", "spec")
			if isScalar(mf["type"].v) {
				mtype = mf["type"].v.Value
			}
		}
		spec := deref(mf["spec"].v)
		ctype, ok := harnessMethods[mtype]
		if !ok {
			lost = append(lost, fmt.Sprintf("notification method %s (prflow sends to Slack-compatible webhooks, signed JSON webhooks and email)", orQuote(mtype)))
		}
		if groups := get(spec, "userGroups"); groups != nil && groups.Kind == yaml.SequenceNode && len(groups.Content) > 0 {
			lost = append(lost, "userGroups (prflow has no user groups to notify; list the addresses in an email channel)")
		}
		switch ctype {
		case "slack", "webhook":
			u := get(spec, "webhookUrl")
			switch {
			case !isScalar(u):
				lost = append(lost, "the method, which names no webhookUrl")
			case secretExprRE.MatchString(u.Value):
				secret := secretExprRE.FindStringSubmatch(u.Value)[1]
				channel = nativeID(secret[strings.LastIndex(secret, ".")+1:])
				setup = fmt.Sprintf("a %s channel %q whose url is the value of Harness secret %q (as env: or file:)", ctype, channel, secret)
			default:
				channel = ruleID
				setup = fmt.Sprintf("a %s channel %q whose url is the webhook URL this rule names (as env: or file:; it is not copied into the pipeline)", ctype, channel)
			}
			if ctype == "webhook" && setup != "" {
				setup += " and a secret for the signature"
			}
		case "email":
			var to []string
			if r := get(spec, "recipients"); r != nil && r.Kind == yaml.SequenceNode {
				for _, x := range r.Content {
					if isScalar(x) {
						to = append(to, x.Value)
					}
				}
			}
			if len(to) == 0 {
				lost = append(lost, "the email method, which names no recipients")
			} else {
				channel = ruleID
				setup = fmt.Sprintf("an email channel %q with smtp settings and to: %s", channel, strings.Join(to, ", "))
			}
		}
		if channel != "" && len(groups) > 0 {
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
				put(r, "channel", strNode(channel))
				r.HeadComment = marker(rp, item.Line)
				out.Content = append(out.Content, r)
				carried = append(carried, strings.Join(g.on, ", "))
			}
			note := "notification channels are configured on the workers (prflow worker --notifiers): " + setup
			c.notes = append(c.notes, note)
		} else if len(groups) == 0 {
			lost = append(lost, "its events (none that prflow has)")
		}
		switch {
		case len(carried) > 0 && len(lost) > 0:
			c.warn(item, rp, "%s carried to channel %q (%s); configure %s on the workers; not carried: %s", label, channel, strings.Join(carried, "; "), setup, strings.Join(lost, "; "))
		case len(carried) > 0:
			c.warn(item, rp, "%s carried to channel %q (%s); configure %s on the workers", label, channel, strings.Join(carried, "; "), setup)
		default:
			c.warn(item, rp, "not carried: %s: %s", label, strings.Join(lost, "; "))
		}
	}
	if len(out.Content) == 0 {
		return nil
	}
	return out
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
