package agent

import (
	"fmt"
	"sort"
	"strings"
)

// Selector is a parsed Kubernetes label selector, the syntax Argo CD takes in ?selector=:
// comma-separated requirements key, !key, key=v, key==v, key!=v, key in (a,b), key notin (a,b).
type Selector struct{ reqs []requirement }

type requirement struct {
	key    string
	op     string // exists, !exists, in, notin
	values []string
}

// ParseSelector parses s; "" matches everything. Errors name the offending requirement.
func ParseSelector(s string) (Selector, error) {
	var sel Selector
	for _, part := range splitTop(s) {
		p := strings.TrimSpace(part)
		if p == "" {
			if strings.TrimSpace(s) != "" {
				return sel, fmt.Errorf("selector %q: empty requirement", s)
			}
			continue
		}
		r, err := parseRequirement(p)
		if err != nil {
			return sel, fmt.Errorf("selector %q: %w", s, err)
		}
		sel.reqs = append(sel.reqs, r)
	}
	return sel, nil
}

// splitTop splits at commas outside parentheses.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func parseRequirement(p string) (requirement, error) {
	if k, ok := strings.CutPrefix(p, "!"); ok {
		k = strings.TrimSpace(k)
		if err := checkKey(k); err != nil {
			return requirement{}, err
		}
		return requirement{key: k, op: "!exists"}, nil
	}
	for _, op := range []string{"==", "!=", "="} {
		if k, v, ok := strings.Cut(p, op); ok {
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if err := checkKey(k); err != nil {
				return requirement{}, err
			}
			if strings.ContainsAny(v, " ()!=") {
				return requirement{}, fmt.Errorf("%q: invalid value %q", p, v)
			}
			if op == "!=" {
				return requirement{key: k, op: "notin", values: []string{v}}, nil
			}
			return requirement{key: k, op: "in", values: []string{v}}, nil
		}
	}
	fields := strings.Fields(p)
	if len(fields) == 1 {
		if err := checkKey(fields[0]); err != nil {
			return requirement{}, err
		}
		return requirement{key: fields[0], op: "exists"}, nil
	}
	if len(fields) >= 2 && (fields[1] == "in" || fields[1] == "notin") {
		k := fields[0]
		if err := checkKey(k); err != nil {
			return requirement{}, err
		}
		rest := strings.TrimSpace(p[strings.Index(p, fields[1])+len(fields[1]):])
		if !strings.HasPrefix(rest, "(") || !strings.HasSuffix(rest, ")") {
			return requirement{}, fmt.Errorf("%q: want %s (v1,v2)", p, fields[1])
		}
		var vals []string
		for _, v := range strings.Split(rest[1:len(rest)-1], ",") {
			vals = append(vals, strings.TrimSpace(v))
		}
		return requirement{key: k, op: fields[1], values: vals}, nil
	}
	return requirement{}, fmt.Errorf("%q: not a label requirement (want key, !key, key=value, key!=value, key in (a,b))", p)
}

func checkKey(k string) error {
	if k == "" {
		return fmt.Errorf("empty label key")
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./", c)) {
			return fmt.Errorf("label key %q: invalid character %q", k, c)
		}
	}
	return nil
}

// Matches reports whether labels satisfy every requirement (!= and notin match a missing key).
func (s Selector) Matches(labels map[string]string) bool {
	for _, r := range s.reqs {
		v, ok := labels[r.key]
		switch r.op {
		case "exists":
			if !ok {
				return false
			}
		case "!exists":
			if ok {
				return false
			}
		case "in":
			if !ok || !contains(r.values, v) {
				return false
			}
		case "notin":
			if ok && contains(r.values, v) {
				return false
			}
		}
	}
	return true
}

// String renders the selector canonically (sorted by key).
func (s Selector) String() string {
	reqs := append([]requirement(nil), s.reqs...)
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].key < reqs[j].key })
	var parts []string
	for _, r := range reqs {
		switch {
		case r.op == "exists":
			parts = append(parts, r.key)
		case r.op == "!exists":
			parts = append(parts, "!"+r.key)
		case r.op == "in" && len(r.values) == 1:
			parts = append(parts, r.key+"="+r.values[0])
		case r.op == "notin" && len(r.values) == 1:
			parts = append(parts, r.key+"!="+r.values[0])
		default:
			parts = append(parts, r.key+" "+r.op+" ("+strings.Join(r.values, ",")+")")
		}
	}
	return strings.Join(parts, ",")
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
