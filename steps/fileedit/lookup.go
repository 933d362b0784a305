package fileedit

import (
	"fmt"
	"strings"
)

// Lookup reads the value at key (the syntax of [Change.Key]) in the document of src that
// doc selects, as Apply would find it: found is false when the key, or a part of it, does
// not exist (a change to it would create it). The value is decoded as Apply compares
// values (integers as int64, merge keys resolved). It is what a change replaces: the
// UpdateReleaseRepo step records it as the edit's old value.
func Lookup(f Format, src []byte, key string, doc Document) (value any, found bool, err error) {
	p, err := parsePath(key)
	if err != nil {
		return nil, false, err
	}
	var root any
	switch f {
	case YAML:
		t, err := parseYAMLText(src)
		if err != nil {
			return nil, false, err
		}
		if len(t.docs) == 0 {
			return nil, false, nil
		}
		i, err := selectDocument(yamlDocInfos(t.docs), doc)
		if err != nil {
			return nil, false, err
		}
		if root, err = decodeYAMLValue(t.docs[i]); err != nil {
			return nil, false, err
		}
		root = normalizeDecoded(root)
	case JSON:
		if err := checkJSONDocument(src, doc); err != nil {
			return nil, false, err
		}
		if len(strings.TrimSpace(string(src))) == 0 {
			return nil, false, nil
		}
		if root, err = decodeJSONValue(src); err != nil {
			return nil, false, &SyntaxError{Format: JSON, Msg: err.Error()}
		}
	default:
		return nil, false, fmt.Errorf("%w: %v", ErrUnsupportedFormat, f)
	}
	v := root
	for _, s := range p {
		switch x := v.(type) {
		case map[string]any:
			if s.isIndex {
				return nil, false, nil
			}
			next, ok := x[s.key]
			if !ok {
				return nil, false, nil
			}
			v = next
		case map[any]any:
			// A YAML map with a key that is not a string (1: x); Apply matches its text.
			if s.isIndex {
				return nil, false, nil
			}
			ok := false
			for k, e := range x {
				if fmt.Sprint(k) == s.key {
					v, ok = e, true
					break
				}
			}
			if !ok {
				return nil, false, nil
			}
		case []any:
			if !s.isIndex || s.index >= len(x) {
				return nil, false, nil
			}
			v = x[s.index]
		default:
			return nil, false, nil
		}
	}
	return v, true, nil
}
