package fileedit

import (
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrAmbiguousDocument: a multi-document YAML file was edited without a
// [Document] selector, or the selector matches more than one document. The
// editor never picks one silently.
var ErrAmbiguousDocument = errors.New("YAML document is ambiguous")

// Document selects the document of a multi-document YAML file that a change
// applies to: by 0-based position, by the Kubernetes kind and metadata.name
// found at its top level, or both (then all given fields must hold for the
// same document). The zero value selects nothing and is only valid for a file
// with at most one non-empty document.
type Document struct {
	Index *int   // 0-based position in the file; nil means any
	Kind  string // top-level "kind", compared exactly; "" means any
	Name  string // "metadata.name", compared exactly; "" means any
}

// DocumentAt selects the document at 0-based position i.
func DocumentAt(i int) Document { return Document{Index: &i} }

// IsZero reports whether d selects nothing.
func (d Document) IsZero() bool { return d.Index == nil && d.Kind == "" && d.Name == "" }

func (d Document) String() string {
	var parts []string
	if d.Index != nil {
		parts = append(parts, fmt.Sprintf("index %d", *d.Index))
	}
	if d.Kind != "" {
		parts = append(parts, fmt.Sprintf("kind %q", d.Kind))
	}
	if d.Name != "" {
		parts = append(parts, fmt.Sprintf("name %q", d.Name))
	}
	if len(parts) == 0 {
		return "no document selector"
	}
	return strings.Join(parts, ", ")
}

// docInfo is what a selector can match in one document.
type docInfo struct {
	empty      bool
	kind, name string
}

func (i docInfo) String() string {
	switch {
	case i.empty:
		return "(empty)"
	case i.kind == "" && i.name == "":
		return "(no kind/name)"
	case i.name == "":
		return i.kind
	}
	return i.kind + "/" + i.name
}

// infoOf reads kind and metadata.name from a decoded document.
func infoOf(v any) docInfo {
	m, ok := v.(map[string]any)
	if !ok {
		return docInfo{empty: v == nil}
	}
	var info docInfo
	info.kind, _ = m["kind"].(string)
	if md, ok := m["metadata"].(map[string]any); ok {
		info.name, _ = md["name"].(string)
	}
	return info
}

func yamlDocInfos(docs []*yaml.Node) []docInfo {
	out := make([]docInfo, len(docs))
	for i, d := range docs {
		if len(d.Content) == 0 || isNull(d.Content[0]) {
			out[i] = docInfo{empty: true}
			continue
		}
		// Only the top level is read, so a decode error here (reported by
		// the edit itself) just leaves kind and name unknown.
		v, _ := decodeYAMLValue(d)
		out[i] = infoOf(v)
	}
	return out
}

// selectDocument returns the index of the document sel picks among docs.
// A file with no documents (an empty file) has one implicit empty document.
func selectDocument(docs []docInfo, sel Document) (int, error) {
	if len(docs) == 0 {
		docs = []docInfo{{empty: true}}
	}
	if sel.IsZero() {
		found := -1
		for i, d := range docs {
			if d.empty {
				continue
			}
			if found >= 0 {
				return 0, fmt.Errorf("%w: the file holds %s; select one with document: {index: N} or {kind: K, name: N}",
					ErrAmbiguousDocument, listDocs(docs))
			}
			found = i
		}
		return max(found, 0), nil
	}
	if sel.Index != nil {
		i := *sel.Index
		if i < 0 || i >= len(docs) {
			return 0, fmt.Errorf("%w: document index %d requested, the file holds %s", ErrNoDocument, i, listDocs(docs))
		}
		if !docs[i].matches(sel) {
			return 0, fmt.Errorf("%w: document %d is %s, not %s", ErrNoDocument, i, docs[i], sel)
		}
		return i, nil
	}
	var hits []int
	for i, d := range docs {
		if d.matches(sel) {
			hits = append(hits, i)
		}
	}
	switch len(hits) {
	case 1:
		return hits[0], nil
	case 0:
		return 0, fmt.Errorf("%w: no document has %s; the file holds %s", ErrNoDocument, sel, listDocs(docs))
	}
	idx := make([]string, len(hits))
	for k, h := range hits {
		idx[k] = fmt.Sprint(h)
	}
	return 0, fmt.Errorf("%w: %s matches documents %s; the file holds %s; add name or index to the selector",
		ErrAmbiguousDocument, sel, strings.Join(idx, ", "), listDocs(docs))
}

func (i docInfo) matches(sel Document) bool {
	if i.empty {
		return sel.Kind == "" && sel.Name == ""
	}
	return (sel.Kind == "" || sel.Kind == i.kind) && (sel.Name == "" || sel.Name == i.name)
}

// listDocs names every document for an error message: "3 documents
// ([0] Job/migrate, [1] Deployment/web, [2] (empty))".
func listDocs(docs []docInfo) string {
	parts := make([]string, len(docs))
	for i, d := range docs {
		parts[i] = fmt.Sprintf("[%d] %s", i, d)
	}
	noun := "documents"
	if len(docs) == 1 {
		noun = "document"
	}
	return fmt.Sprintf("%d %s (%s)", len(docs), noun, strings.Join(parts, ", "))
}

// checkJSONDocument applies a selector to a JSON file, which is one document.
func checkJSONDocument(src []byte, sel Document) error {
	if sel.IsZero() {
		return nil
	}
	info := docInfo{empty: true}
	if len(strings.TrimSpace(string(src))) > 0 {
		v, err := decodeJSONValue(src)
		if err != nil {
			return &SyntaxError{Format: JSON, Msg: err.Error()}
		}
		info = infoOf(v)
	}
	_, err := selectDocument([]docInfo{info}, sel)
	return err
}
