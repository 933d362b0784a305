package appset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"text/template"
)

// MergeTemplate overlays a generator-level template on spec.template: the generator's
// non-empty values win, objects merge key by key.
func MergeTemplate(base, over json.RawMessage) (json.RawMessage, error) {
	var overMap map[string]any
	if len(over) > 0 {
		if err := json.Unmarshal(over, &overMap); err != nil {
			return nil, fmt.Errorf("generator template: %w", err)
		}
	}
	if isEmptyJSON(overMap) {
		return base, nil
	}
	var baseMap map[string]any
	if len(base) > 0 {
		if err := json.Unmarshal(base, &baseMap); err != nil {
			return nil, fmt.Errorf("template: %w", err)
		}
	}
	out, err := json.Marshal(mergeMaps(baseMap, overMap))
	if err != nil {
		return nil, fmt.Errorf("merging generator template: %w", err)
	}
	return out, nil
}

func isEmptyJSON(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case string:
		return t == ""
	case map[string]any:
		for _, e := range t {
			if !isEmptyJSON(e) {
				return false
			}
		}
		return true
	case []any:
		return len(t) == 0
	default:
		return false
	}
}

func mergeMaps(base, over map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if isEmptyJSON(v) {
			continue
		}
		if om, ok := v.(map[string]any); ok {
			if bm, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// Render substitutes params into every string (keys included) of the JSON template:
// {{ key }} fasttemplate-style by default (unknown keys are left as they are), Go
// text/template with goTemplate and goOpts (e.g. "missingkey=error"). An error names the
// template field it comes from ("spec: destination: namespace: …").
func Render(tmpl json.RawMessage, params Params, goTemplate bool, goOpts []string) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(tmpl))
	dec.UseNumber() // numbers stay as written
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	v, err := renderAny(v, params, goTemplate, goOpts)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func renderAny(v any, params Params, goTemplate bool, goOpts []string) (any, error) {
	switch t := v.(type) {
	case string:
		return renderString(t, params, goTemplate, goOpts)
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			rk, err := renderString(k, params, goTemplate, goOpts)
			if err != nil {
				return nil, err
			}
			re, err := renderAny(e, params, goTemplate, goOpts)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[rk] = re
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			re, err := renderAny(e, params, goTemplate, goOpts)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = re
		}
		return out, nil
	default:
		return v, nil
	}
}

var goTemplateFuncs = template.FuncMap{
	"lower":     strings.ToLower,
	"upper":     strings.ToUpper,
	"trim":      strings.TrimSpace,
	"replace":   func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
	"normalize": SanitizeName,
	"default": func(def, v any) any {
		if v == nil || v == "" {
			return def
		}
		return v
	},
	"toJson": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"join": func(sep string, v []any) string {
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = fmt.Sprintf("%v", e)
		}
		return strings.Join(parts, sep)
	},
}

func renderString(s string, params Params, goTemplate bool, goOpts []string) (string, error) {
	if !strings.Contains(s, "{{") {
		return s, nil
	}
	if goTemplate {
		t := template.New("").Funcs(goTemplateFuncs)
		if len(goOpts) > 0 {
			t = t.Option(goOpts...)
		}
		t, err := t.Parse(s)
		if err != nil {
			return "", fmt.Errorf("failed to parse template %q: %w", s, err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, map[string]any(params)); err != nil {
			return "", fmt.Errorf("failed to execute template %q: %w", s, err)
		}
		return buf.String(), nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "{{")
		if i < 0 {
			b.WriteString(s)
			break
		}
		j := strings.Index(s[i+2:], "}}")
		if j < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i])
		tag := s[i+2 : i+2+j]
		if v, ok := params[strings.TrimSpace(tag)]; ok && strings.TrimSpace(tag) != "" {
			b.WriteString(fmt.Sprintf("%v", v))
		} else {
			b.WriteString("{{" + tag + "}}")
		}
		s = s[i+2+j+2:]
	}
	return b.String(), nil
}
