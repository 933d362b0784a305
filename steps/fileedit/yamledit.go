package fileedit

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"go.yaml.in/yaml/v3"
)

// applyYAML applies the changes one at a time. Each change is located in a
// fresh parse of the current text, turned into byte splices, and checked: the
// parse of the new text must decode to the old tree with the same logical
// change made to it (the editor mutates that tree alongside the splices).
func applyYAML(src []byte, cs []prepared, sel Document) ([]byte, error) {
	t, err := parseYAMLText(src)
	if err != nil {
		return nil, err
	}
	docIndex, err := selectDocument(yamlDocInfos(t.docs), sel)
	if err != nil {
		return nil, err
	}
	orig := make([]any, len(t.docs))
	for i, d := range t.docs {
		if orig[i], err = decodeYAMLValue(d); err != nil {
			return nil, err
		}
	}
	st := detectYAMLStyle(t)
	var e *yamlEditor
	var doc *yaml.Node
	if _, err := applyEach(src, cs, func(c prepared, _ []byte) (*splices, error) {
		if len(t.docs) == 0 {
			doc = &yaml.Node{Kind: yaml.DocumentNode}
		} else {
			doc = t.docs[docIndex]
		}
		e = &yamlEditor{t: t, w: &yamlWriter{st: st}, st: st, c: c, doc: doc}
		if err := e.setPath(); err != nil {
			return nil, err
		}
		return &e.ed, nil
	}, func(c prepared, out []byte) error {
		for _, op := range e.ops {
			op()
		}
		want, err := decodeYAMLValue(doc)
		if err != nil {
			return fmt.Errorf("%w: %v", errEditCheck, err)
		}
		t2, err := parseYAMLText(out)
		if err != nil {
			return fmt.Errorf("%w: result does not parse: %v", errEditCheck, err)
		}
		if len(t2.docs) != max(len(t.docs), 1) {
			return fmt.Errorf("%w: document count changed from %d to %d", errEditCheck, len(t.docs), len(t2.docs))
		}
		got, err := decodeYAMLValue(t2.docs[docIndex])
		if err := sameResult(normalizeDecoded(want), normalizeDecoded(got), err); err != nil {
			return err
		}
		t = t2
		return nil
	}); err != nil {
		return nil, err
	}
	for i, d := range t.docs {
		if i == docIndex || i >= len(orig) {
			continue
		}
		v, err := decodeYAMLValue(d)
		if err != nil || !valuesEqual(v, orig[i]) {
			return nil, fmt.Errorf("%w: document %d changed", errEditCheck, i)
		}
	}
	return t.src, nil
}

// normalizeDecoded maps yaml.v3's Go types onto the canonical ones (int to
// int64) so that decoded file content compares with Change values.
func normalizeDecoded(v any) any {
	switch v := v.(type) {
	case int:
		return int64(v)
	case uint64:
		if v <= math.MaxInt64 {
			return int64(v)
		}
		return v
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = normalizeDecoded(x)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = normalizeDecoded(x)
		}
		return out
	case map[any]any:
		out := make(map[any]any, len(v))
		for k, x := range v {
			out[k] = normalizeDecoded(x)
		}
		return out
	}
	return v
}

// yamlEditor turns one change into splices (ed) and the matching mutations
// of the parsed tree (ops, run after the splices are computed).
type yamlEditor struct {
	t   *yamlText
	w   *yamlWriter
	st  *yamlStyle
	c   prepared
	doc *yaml.Node
	ed  splices
	ops []func()

	aliased map[*yaml.Node]bool // anchored nodes that some alias refers to
}

// yslot is a node together with what its surroundings say about how it may
// be rewritten.
type yslot struct {
	node     *yaml.Node
	flow     bool    // inside a flow collection
	flowVal  bool    // a value inside a flow map (an empty one may lack its ':')
	indent   int     // column of the enclosing block collection; -1 at the root
	lead     int     // offset just after the ':' or '-' introducing the node in block context; -1 if none
	item     bool    // a block list item
	at       keyPath // where the node is, for messages
	rootSlot bool
}

func (e *yamlEditor) path() keyPath { return e.c.path }

func (e *yamlEditor) aliasErr(at keyPath, detail string) error {
	return keyErr(e.c.key, ErrAlias, fmt.Sprintf("%s %s", at.describe(), detail))
}

func (e *yamlEditor) setPath() error {
	if len(e.doc.Content) == 0 {
		return e.createRoot()
	}
	return setPath(e, e.c, yslot{node: e.doc.Content[0], indent: -1, lead: -1, rootSlot: true})
}

// createRoot writes the first content of an empty file.
func (e *yamlEditor) createRoot() error {
	v, err := build(e.path(), e.path(), 0, e.c.key, e.c.value)
	if err != nil {
		return err
	}
	lines, err := e.w.collectionLines(v, 0)
	if err != nil {
		return keyErr(e.c.key, ErrUnsupportedValue, err.Error())
	}
	src := e.t.src
	text := strings.Join(lines, e.st.nl) + e.st.nl
	if len(src) > 0 && src[len(src)-1] != '\n' && src[len(src)-1] != '\r' {
		text = e.st.nl + text
	}
	e.ed.insert(len(src), text)
	doc := e.doc
	e.ops = append(e.ops, func() { doc.Content = []*yaml.Node{encodeNode(v)} })
	return nil
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func yamlKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "map"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return "string"
		case "!!int", "!!float":
			return "number"
		case "!!bool":
			return "boolean"
		case "!!null":
			return "null"
		case "!!timestamp":
			return "timestamp"
		case "!!binary":
			return "binary"
		}
		return "scalar tagged " + n.Tag
	}
	return "node"
}

// findKey returns the index of the key node for key in mapping n, or -1.
func findKey(n *yaml.Node, key string) int {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		// An empty key ("? " alone) matches "", as yaml.v3 decodes it.
		if k.Kind == yaml.ScalarNode && k.Tag != "!!merge" && k.Value == key {
			return i
		}
	}
	return -1
}

// mergedValue finds key among the maps merged into n with "<<".
func mergedValue(n *yaml.Node, key string, depth int) *yaml.Node {
	if depth > 50 {
		return nil
	}
	var fromMap func(m *yaml.Node) *yaml.Node
	fromMap = func(m *yaml.Node) *yaml.Node {
		if m.Kind == yaml.AliasNode && m.Alias != nil {
			m = m.Alias
		}
		if m.Kind != yaml.MappingNode {
			return nil
		}
		if i := findKey(m, key); i >= 0 {
			return m.Content[i+1]
		}
		return mergedValue(m, key, depth+1)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Tag != "!!merge" {
			continue
		}
		v := n.Content[i+1]
		if v.Kind == yaml.SequenceNode {
			for _, m := range v.Content {
				if r := fromMap(m); r != nil {
					return r
				}
			}
			continue
		}
		if r := fromMap(v); r != nil {
			return r
		}
	}
	return nil
}

func hasMergeKey(n *yaml.Node) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Tag == "!!merge" {
			return true
		}
	}
	return false
}

// The yamlEditor is the YAML docTree of the shared walk (walk.go).

func (e *yamlEditor) shape(s yslot) nodeShape {
	switch n := s.node; {
	case isNull(n):
		return shapeNull
	case n.Kind == yaml.MappingNode:
		return shapeMap
	case n.Kind == yaml.SequenceNode:
		return shapeList
	}
	return shapeScalar
}

func (e *yamlEditor) kindName(s yslot) string  { return yamlKind(s.node) }
func (e *yamlEditor) location(s yslot) keyPath { return s.at }
func (e *yamlEditor) items(s yslot) int        { return len(s.node.Content) }

// blocked refuses to edit through an alias or to replace it.
func (e *yamlEditor) blocked(s yslot, at keyPath) error {
	if n := s.node; n.Kind == yaml.AliasNode {
		return e.aliasErr(at, fmt.Sprintf("is an alias (*%s); edit the anchored value &%s instead", n.Value, n.Value))
	}
	return nil
}

// lookup counts members, not Content entries: member i is at Content[2i].
func (e *yamlEditor) lookup(s yslot, key string) int {
	if ki := findKey(s.node, key); ki >= 0 {
		return ki / 2
	}
	return -1
}

func (e *yamlEditor) member(s yslot, i int) (yslot, error) { return e.memberSlot(s, 2*i) }
func (e *yamlEditor) item(s yslot, i int) (yslot, error)   { return e.itemSlot(s, i) }

// memberKeys refuses a map with a merge key or a key that is not a plain
// scalar: such a map is rewritten whole.
func (e *yamlEditor) memberKeys(s yslot) ([]string, bool) {
	n := s.node
	if hasMergeKey(n) {
		return nil, false
	}
	keys := make([]string, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind != yaml.ScalarNode {
			return nil, false
		}
		keys = append(keys, k.Value)
	}
	return keys, true
}

// inherited handles a key the map of s gets through a merge key (<<): the
// walk may not descend into it, and setting it to the value it inherits
// changes nothing.
func (e *yamlEditor) inherited(s yslot, p keyPath, i int) (bool, error) {
	v := mergedValue(s.node, p[i].key, 0)
	if v == nil {
		return false, nil
	}
	if i < len(p)-1 {
		return true, e.aliasErr(p[:i+1], "is inherited through a merge key (<<); edit the merged map or override the whole key")
	}
	eq, err := e.equal(v, e.c.value)
	return eq || err != nil, err
}

func (e *yamlEditor) holds(s yslot, v any) (bool, error) { return e.equal(s.node, v) }

// memberSlot is the slot of the value of the key at Content[ki] of s.node.
func (e *yamlEditor) memberSlot(s yslot, ki int) (yslot, error) {
	m := s.node
	c := yslot{node: m.Content[ki+1], at: s.at.child(segment{key: m.Content[ki].Value}), lead: -1, indent: -1}
	if s.flow || m.Style&yaml.FlowStyle != 0 {
		c.flow, c.flowVal = true, true
		return c, nil
	}
	c.indent = e.t.col(e.t.contentStart(m))
	ke, err := e.t.end(m.Content[ki], c.indent, false)
	if err != nil {
		return c, e.layoutErr(c.at, err)
	}
	if p := e.t.skipSpace(ke); p < len(e.t.src) && e.t.src[p] == ':' {
		c.lead = p + 1
	} else if isEmptyScalar(c.node) {
		// "? key" with no ':' — there is no place for a value yet.
		return c, e.layoutErr(c.at, fmt.Errorf("no ':' after the key at line %d", m.Content[ki].Line))
	}
	return c, nil
}

// itemSlot is the slot of item i of list s.node.
func (e *yamlEditor) itemSlot(s yslot, i int) (yslot, error) {
	l := s.node
	c := yslot{node: l.Content[i], at: s.at.child(segment{index: i, isIndex: true}), lead: -1, indent: -1}
	if s.flow || l.Style&yaml.FlowStyle != 0 {
		c.flow = true
		return c, nil
	}
	c.item = true
	c.indent = e.t.col(e.t.contentStart(l))
	p := e.t.contentStart(l)
	if i > 0 {
		var err error
		if p, err = e.t.end(l.Content[i-1], c.indent, false); err != nil {
			return c, e.layoutErr(c.at, err)
		}
	}
	if p = e.t.skipSpace(p); p < len(e.t.src) && e.t.src[p] == '-' {
		c.lead = p + 1
	}
	return c, nil
}

func (e *yamlEditor) layoutErr(at keyPath, err error) error {
	return keyErr(e.c.key, ErrUnsupportedValue, fmt.Sprintf("cannot locate %s in the file: %v", at.describe(), err))
}

// equal reports whether node n already holds v.
func (e *yamlEditor) equal(n *yaml.Node, v any) (bool, error) {
	have, err := decodeYAMLValue(n)
	if err != nil {
		return false, err
	}
	return valuesEqual(normalizeDecoded(have), v), nil
}

// encodeNode builds the node tree of a canonical value for the model.
// (yaml.v3's Node.Encode is not used: it drops a lone "\n" string.)
func encodeNode(v any) *yaml.Node {
	tag, _ := valueKind(v)
	switch x := v.(type) {
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: x, Style: yaml.DoubleQuotedStyle}
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: tag}
		for _, it := range x {
			n.Content = append(n.Content, encodeNode(it))
		}
		return n
	case map[string]any:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: tag}
		for _, k := range sortedKeys(x) {
			n.Content = append(n.Content, encodeNode(k), encodeNode(x[k]))
		}
		return n
	case nil, bool, int64, uint64, float64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: (&yamlWriter{}).scalar(v, hintNone, false)}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
}

// referencedAnchors reports an anchor inside n's subtree (n's own anchor is
// kept on rewrite) that an alias elsewhere refers to.
func (e *yamlEditor) referencedAnchor(n *yaml.Node) string {
	if e.aliased == nil {
		e.aliased = map[*yaml.Node]bool{}
		var walk func(x *yaml.Node, depth int)
		walk = func(x *yaml.Node, depth int) {
			if depth > 10000 {
				return
			}
			if x.Kind == yaml.AliasNode && x.Alias != nil {
				e.aliased[x.Alias] = true
			}
			for _, c := range x.Content {
				walk(c, depth+1)
			}
		}
		walk(e.doc, 0)
	}
	var found string
	var walk func(x *yaml.Node, depth int)
	walk = func(x *yaml.Node, depth int) {
		if found != "" || depth > 10000 {
			return
		}
		if x != n && x.Anchor != "" && e.aliased[x] {
			found = x.Anchor
			return
		}
		for _, c := range x.Content {
			walk(c, depth+1)
		}
	}
	walk(n, 0)
	return found
}

// replace rewrites the node of slot s as v and records the model mutation.
func (e *yamlEditor) replace(s yslot, v any) error {
	n := s.node
	if a := e.referencedAnchor(n); a != "" {
		return e.aliasErr(s.at, fmt.Sprintf("contains the anchor &%s used by an alias elsewhere; set the keys inside it instead", a))
	}
	if err := e.replaceText(s, v); err != nil {
		return err
	}
	e.ops = append(e.ops, func() {
		anchor := n.Anchor
		*n = *encodeNode(v)
		n.Anchor = anchor
	})
	return nil
}

// needSpace reports whether text placed at p needs a separating blank
// (because it would otherwise touch the ':' or '-' before it).
func (e *yamlEditor) needSpace(p int) bool {
	if p == 0 {
		return false
	}
	switch e.t.src[p-1] {
	case ' ', '\t', '\n', '\r', '{', '[':
		return false
	}
	return true
}

func (e *yamlEditor) spaced(p int, text string) string {
	if text != "" && e.needSpace(p) {
		return " " + text
	}
	return text
}

// spaceBeforeComment keeps a comment that directly follows a quoted value
// ('x'#c) a comment when the new value is plain.
func (e *yamlEditor) spaceBeforeComment(p int) string {
	if p < len(e.t.src) && e.t.src[p] == '#' {
		return " "
	}
	return ""
}

// replaceText computes the splices that put v where the node of s is.
func (e *yamlEditor) replaceText(s yslot, v any) error {
	t, n := e.t, s.node
	pr := t.props(n)
	props := keptProps(pr, v)
	hint := hintOf(n)
	ce, err := t.end(n, s.indent, s.flow)
	if err != nil {
		return e.layoutErr(s.at, err)
	}
	e.w.noNewBlocks = t.swallowable(t.lineEnd(ce))
	defer func() { e.w.noNewBlocks = false }()

	// A flow collection with content stays in flow style; an empty one
	// ("resources: {}") is the usual placeholder for a block map.
	if s.flow || isFlowCollection(n) && len(n.Content) > 0 && !s.rootSlot {
		text, err := e.w.flow(v, hint)
		if err != nil {
			return e.c.valueErr(err)
		}
		text = joinNonEmpty(" ", props, text)
		if isEmptyScalar(n) && pr.start == pr.end && s.flowVal {
			// An empty value in a flow map sits at the next ',' or '}'; its
			// ':' may be missing ("{a, b}").
			q := pr.start - 1
			for q >= 0 && (isBlank(t.src[q]) || t.src[q] == '\n' || t.src[q] == '\r') {
				q--
			}
			if q < 0 || t.src[q] != ':' {
				text = ": " + text
			}
		}
		e.ed.replace(pr.start, ce, e.spaced(pr.start, text)+e.spaceBeforeComment(ce))
		return nil
	}

	// What to write: a one-line text, or a head (block scalar header or
	// nothing) followed by lines.
	var inline string
	var lines []string
	compactOK := false
	switch {
	case isNonEmptyCollection(v):
		col := e.collectionCol(s, v)
		if lines, err = e.w.collectionLines(v, col); err != nil {
			return e.c.valueErr(err)
		}
		compactOK = s.item
	case e.w.useBlock(v, hint, false, isBlockScalar(n)):
		contentCol := max(s.indent, 0) + e.st.unit
		if s.indent < 0 {
			contentCol = e.st.unit
		}
		if isBlockScalar(n) {
			if bi, err := t.blockScalar(t.contentStart(n), s.indent); err == nil && bi.indent > s.indent {
				contentCol = bi.indent
			}
		}
		header, bl, ok := e.w.block(v.(string), hint, contentCol, s.indent)
		if ok {
			inline, lines = header, bl
		} else {
			inline = doubleQuote(v.(string))
		}
	default:
		if m, ok := v.(map[string]any); ok && len(m) == 0 {
			inline = "{}"
		} else if l, ok := v.([]any); ok && len(l) == 0 {
			inline = "[]"
		} else {
			inline = e.w.scalar(v, hint, false)
		}
	}
	nl := e.st.nl
	head := joinNonEmpty(" ", props, inline)
	body := strings.Join(lines, nl)
	// A block scalar with clip chomping needs the line break after its last
	// line, even at the end of a file that has no final newline.
	clip := inline != "" && lines != nil && !strings.HasSuffix(inline, "-") || inline == "" && e.w.endsWithClipBlock(v)
	atEnd := func(p int) string {
		if clip && p >= len(t.src) {
			return nl
		}
		return ""
	}

	switch {
	case isBlockScalar(n):
		bi, err := t.blockScalar(t.contentStart(n), s.indent)
		if err != nil {
			return e.layoutErr(s.at, err)
		}
		switch {
		case head == "" && s.lead >= 0:
			e.ed.replace(s.lead, bi.headerEnd, "")
		case s.lead >= 0 && !t.sameLine(s.lead, pr.start):
			// The header sits on a line of its own (it may be at column 0);
			// the new value goes next to the key instead.
			e.ed.replace(s.lead, bi.headerEnd, " "+head)
		default:
			e.ed.replace(pr.start, bi.headerEnd, head)
		}
		switch {
		case lines == nil && bi.hasContent:
			e.ed.replace(bi.lineEnd, bi.contentEnd, "")
		case lines != nil && bi.hasContent:
			e.ed.replace(bi.lineEnd, bi.contentEnd, nl+body+atEnd(bi.contentEnd))
		case lines != nil:
			e.ed.insert(bi.lineEnd, nl+body+atEnd(bi.lineEnd))
		}

	case isBlockCollection(n):
		cs := t.contentStart(n)
		if lines == nil {
			if s.lead >= 0 {
				e.ed.replace(s.lead, ce, " "+head)
			} else {
				e.ed.replace(pr.start, ce, head)
			}
			return nil
		}
		if pr.end > pr.start && pr.end <= cs {
			if props == "" && s.lead >= 0 {
				e.ed.replace(s.lead, pr.end, "")
			} else {
				e.ed.replace(pr.start, pr.end, props)
			}
		}
		if inline != "" {
			// Collections are only ever replaced by collections.
			return e.layoutErr(s.at, fmt.Errorf("cannot replace a block collection with a block scalar"))
		}
		if ls := t.lineStart(cs); t.restIsBlank(ls, cs) {
			e.ed.replace(ls, ce, body+atEnd(ce))
		} else if compactOK {
			e.ed.replace(cs, ce, strings.TrimLeft(body, " ")+atEnd(ce))
		} else {
			e.ed.replace(cs, ce, nl+body+atEnd(ce))
		}

	default: // a one-line node: scalar, alias, flow collection or empty value
		if lines == nil {
			e.ed.replace(pr.start, ce, e.spaced(pr.start, head)+e.spaceBeforeComment(ce))
			return nil
		}
		if s.rootSlot && head == "" {
			if bytes.IndexByte(t.src[ce:], '\t') >= 0 {
				// yaml.v3 accepts tabs around comments after a scalar
				// document, not inside a block collection.
				return e.layoutErr(s.at, fmt.Errorf("tabs follow the scalar document; replace them with spaces first"))
			}
			prefix, suffix := "", ""
			if t.col(pr.start) != 0 {
				prefix = nl
			}
			if ce < len(t.src) && !t.restOfLineBlank(ce) || ce == len(t.src) && (ce == 0 || t.src[ce-1] == '\n' || t.src[ce-1] == '\r') {
				suffix = nl // keep what follows on its own line, and a final newline
			}
			if suffix == "" {
				suffix = atEnd(ce)
			}
			e.ed.replace(pr.start, ce, prefix+body+suffix)
			return nil
		}
		if compactOK && head == "" && t.restOfLineBlank(ce) {
			e.ed.replace(pr.start, t.lineEnd(ce), e.spaced(pr.start, strings.TrimLeft(body, " "))+atEnd(t.lineEnd(ce)))
			return nil
		}
		if head == "" && s.lead >= 0 {
			e.ed.replace(s.lead, ce, "")
		} else {
			e.ed.replace(pr.start, ce, e.spaced(pr.start, head))
		}
		e.ed.insert(t.lineEnd(ce), nl+body+atEnd(t.lineEnd(ce)))
	}
	return nil
}

// swallowable reports whether text ending at p (a line break or a line
// start) is followed, after empty lines, by a line that a block scalar
// ending there could absorb: an indented comment or a line of blanks.
func (t *yamlText) swallowable(p int) bool {
	if n := breakLen(t.src, p); n > 0 {
		p += n
	}
	for p < len(t.src) {
		q := t.skipBlanks(p)
		switch {
		case q >= len(t.src):
			return q > p
		case breakLen(t.src, q) > 0:
			if q > p {
				return true
			}
			p = q + breakLen(t.src, q)
		default:
			return t.src[q] == '#' && q > p
		}
	}
	return false
}

// endsWithClipBlock reports whether the last line written for v is the
// content of a block scalar with clip chomping.
func (w *yamlWriter) endsWithClipBlock(v any) bool {
	switch x := v.(type) {
	case string:
		return w.useBlock(x, hintNone, false, false) && strings.HasSuffix(x, "\n")
	case map[string]any:
		if len(x) == 0 {
			return false
		}
		keys := sortedKeys(x)
		return w.endsWithClipBlock(x[keys[len(keys)-1]])
	case []any:
		return len(x) > 0 && w.endsWithClipBlock(x[len(x)-1])
	}
	return false
}

// restIsBlank reports whether src[from:to] holds only blanks.
func (t *yamlText) restIsBlank(from, to int) bool {
	for i := from; i < to; i++ {
		if !isBlank(t.src[i]) {
			return false
		}
	}
	return true
}

// collectionCol is the column for the lines of a new map or list in slot s.
func (e *yamlEditor) collectionCol(s yslot, v any) int {
	t, n := e.t, s.node
	_, isMap := v.(map[string]any)
	start := t.props(n).start
	if isBlockCollection(n) {
		start = t.contentStart(n)
	}
	if s.item && s.lead >= 0 && t.sameLine(s.lead, start) {
		// "- a: 1": keep the column after the dash ("-" alone gets a space).
		if e.needSpace(start) {
			return t.col(start) + 1
		}
		return t.col(start)
	}
	if isBlockCollection(n) && (n.Kind == yaml.MappingNode) == isMap {
		return t.col(start)
	}
	switch {
	case s.rootSlot:
		return 0
	case s.item:
		return s.indent + 2
	case isMap:
		return s.indent + e.st.unit
	}
	return s.indent + e.st.seqIndent
}

// insertionPoint is where lines go after a block collection ending at end
// whose entries sit at column col: the start of the next line, past comment
// lines indented deeper than col (they belong to the last entry). atEOF says
// the file ends without a line break there.
func (e *yamlEditor) insertionPoint(end, col int) (p int, atEOF bool) {
	t := e.t
	le := t.lineEnd(end)
	if le >= len(t.src) {
		return len(t.src), true
	}
	p = le + breakLen(t.src, le)
	for p < len(t.src) {
		q := t.skipBlanks(p)
		if q < len(t.src) && t.src[q] == '#' && q-p > col {
			le := t.lineEnd(q)
			if le >= len(t.src) {
				return len(t.src), true
			}
			p = le + breakLen(t.src, le)
			continue
		}
		break
	}
	return p, false
}

// insertLines inserts whole lines at p; at the end of a file without a
// final newline they go after a new line break, and get none of their own
// unless the last of the values needs it (see endsWithClipBlock).
func (e *yamlEditor) insertLines(p int, atEOF bool, lines []string, last any) {
	nl := e.st.nl
	text := strings.Join(lines, nl)
	if atEOF {
		text = nl + text
		if e.w.endsWithClipBlock(last) {
			text += nl
		}
	} else {
		text += nl
	}
	e.ed.insert(p, text)
}

func keyHint(m *yaml.Node) scalarHint {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Tag == "!!merge" {
			continue
		}
		switch h := hintOf(m.Content[i]); h {
		case hintDouble, hintSingle:
			return h
		}
		return hintPlain
	}
	return hintNone
}

// insertMembers appends new key/value pairs to the map of slot s.
func (e *yamlEditor) insertMembers(s yslot, kvs []kv) error {
	m := s.node
	e.ops = append(e.ops, func() {
		for _, x := range kvs {
			m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: x.key}, encodeNode(x.value))
		}
	})
	kh := keyHint(m)
	var lastVal *yaml.Node
	if len(m.Content) > 0 {
		lastVal = m.Content[len(m.Content)-1]
	}
	vh := hintNone // map values are of mixed kinds: siblings say little
	if m.Style&yaml.FlowStyle != 0 {
		if len(m.Content) == 0 {
			nm := make(map[string]any, len(kvs))
			for _, x := range kvs {
				nm[x.key] = x.value
			}
			return e.replaceText(s, nm)
		}
		return e.appendFlow(s, m.Content[len(m.Content)-2], lastVal, len(kvs), func(i int) (string, error) {
			k, err := e.w.key(kvs[i].key, kh, true)
			if err != nil {
				return "", err
			}
			val, err := e.w.flow(kvs[i].value, vh)
			return k + ": " + val, err
		})
	}
	values := make([]any, len(kvs))
	for i, x := range kvs {
		values[i] = x.value
	}
	return e.appendBlock(s, lastVal, vh, false, values, func(i, col int) (string, error) {
		k, err := e.w.key(kvs[i].key, kh, false)
		return strings.Repeat(" ", col) + k + ":", err
	})
}

// appendFlow appends count new entries to the flow map or list of slot s.
// The last entry starts with node first (its key, or the item itself) and
// ends with node last. New entries go on lines of their own when the last
// entry does not share the collection's first line, else after ", ". entry
// renders entry i.
func (e *yamlEditor) appendFlow(s yslot, first, last *yaml.Node, count int, entry func(i int) (string, error)) error {
	t := e.t
	le, err := t.end(last, -1, true)
	if err != nil {
		return e.layoutErr(s.at, err)
	}
	fs := t.nodeStart(first)
	multi := !t.sameLine(t.contentStart(s.node), fs)
	var b strings.Builder
	b.WriteString(e.afterProps(last))
	for i := range count {
		if multi {
			b.WriteString("," + e.st.nl + leadingBlanks(t, fs))
		} else {
			b.WriteString(", ")
		}
		text, err := entry(i)
		if err != nil {
			return e.c.valueErr(err)
		}
		b.WriteString(text)
	}
	e.ed.insert(le, b.String())
	return nil
}

// appendBlock appends values as new entries of the block map or list of
// slot s, after its last entry and the comment lines that belong to it.
// prefix renders the text before value i ("key:" or "-") for entries at
// column col; item says the entries are list items; hint is the quoting new
// strings copy. last is the collection's last value: when it is a non-empty
// flow collection, so are new collections.
func (e *yamlEditor) appendBlock(s yslot, last *yaml.Node, hint scalarHint, item bool, values []any, prefix func(i, col int) (string, error)) error {
	t, n := e.t, s.node
	col := t.col(t.contentStart(n))
	end, err := t.end(n, s.indent, false)
	if err != nil {
		return e.layoutErr(s.at, err)
	}
	p, atEOF := e.insertionPoint(end, col)
	e.w.noNewBlocks = t.swallowable(p)
	defer func() { e.w.noNewBlocks = false }()
	flowSiblings := last != nil && isFlowCollection(last) && len(last.Content) > 0
	var lines []string
	for i, v := range values {
		pre, err := prefix(i, col)
		var l []string
		if err == nil {
			if flowSiblings && isNonEmptyCollection(v) {
				var text string
				text, err = e.w.flow(v, hintNone)
				l = []string{pre + " " + text}
			} else {
				l, err = e.w.valueLines(pre, v, hint, col, item)
			}
		}
		if err != nil {
			return e.c.valueErr(err)
		}
		lines = append(lines, l...)
	}
	if atEOF {
		if err := e.keepLastBlockValue(n, s); err != nil {
			return err
		}
	}
	e.insertLines(p, atEOF, lines, values[len(values)-1])
	return nil
}

// keepLastBlockValue is called before lines are appended at the end of a
// file without a final newline. If the file ends with a block scalar, the
// line break added after it would become part of its value under clip
// chomping; switching it to strip chomping keeps the value as it is.
func (e *yamlEditor) keepLastBlockValue(n *yaml.Node, s yslot) error {
	indent := s.indent
	for (n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode) && len(n.Content) > 0 && n.Style&yaml.FlowStyle == 0 {
		indent = e.t.col(e.t.contentStart(n))
		n = n.Content[len(n.Content)-1]
	}
	if !isBlockScalar(n) {
		return nil
	}
	bi, err := e.t.blockScalar(e.t.contentStart(n), indent)
	if err != nil {
		return e.layoutErr(s.at, err)
	}
	header := string(e.t.src[bi.start:bi.headerEnd])
	switch {
	case strings.Contains(header, "-"):
		return nil
	case strings.Contains(header, "+"):
		return e.layoutErr(s.at, fmt.Errorf("the file ends in a block scalar with keep chomping and no final newline; add the newline first"))
	}
	e.ed.insert(bi.headerEnd, "-")
	return nil
}

// afterProps separates text appended right after an empty value that has
// properties ("[!]" + ", x" would read as the tag "!,").
func (e *yamlEditor) afterProps(n *yaml.Node) string {
	if pr := e.t.props(n); isEmptyScalar(n) && pr.end > pr.start {
		return " "
	}
	return ""
}

func leadingBlanks(t *yamlText, p int) string {
	ls := t.lineStart(p)
	q := ls
	for q < p && isBlank(t.src[q]) {
		q++
	}
	return string(t.src[ls:q])
}

// appendItems appends items to the list of slot s.
func (e *yamlEditor) appendItems(s yslot, items []any) error {
	l := s.node
	e.ops = append(e.ops, func() {
		for _, x := range items {
			l.Content = append(l.Content, encodeNode(x))
		}
	})
	var lastItem *yaml.Node
	if len(l.Content) > 0 {
		lastItem = l.Content[len(l.Content)-1]
	}
	vh := siblingHint(lastItem)
	if l.Style&yaml.FlowStyle != 0 {
		if len(l.Content) == 0 {
			return e.replaceText(s, items)
		}
		return e.appendFlow(s, lastItem, lastItem, len(items), func(i int) (string, error) {
			return e.w.flow(items[i], vh)
		})
	}
	return e.appendBlock(s, lastItem, vh, true, items, func(_, col int) (string, error) {
		return strings.Repeat(" ", col) + "-", nil
	})
}
