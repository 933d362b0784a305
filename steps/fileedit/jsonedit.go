package fileedit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// jsonNode is a JSON value with its byte span in the source.
type jsonNode struct {
	kind       byte // '{', '[', '"', '0' (number), 't', 'f', 'n'
	start, end int
	members    []jsonMember // objects
	items      []*jsonNode  // arrays
}

type jsonMember struct {
	key      string
	keyStart int
	keyEnd   int
	value    *jsonNode
}

const maxJSONDepth = 10000

type jsonParser struct {
	src   []byte
	pos   int
	depth int
}

// parseJSONText parses one JSON value (RFC 8259; a leading UTF-8 BOM is
// allowed) and records the span of every value.
func parseJSONText(src []byte) (*jsonNode, error) {
	p := &jsonParser{src: src}
	if bytes.HasPrefix(src, []byte("\xEF\xBB\xBF")) {
		p.pos = 3
	}
	p.space()
	n, err := p.value()
	if err != nil {
		return nil, err
	}
	p.space()
	if p.pos < len(src) {
		return nil, p.errorf("unexpected %s after the top-level value", p.describe())
	}
	return n, nil
}

func (p *jsonParser) errorf(format string, args ...any) error {
	line, col := 1, 1
	for i := 0; i < p.pos && i < len(p.src); {
		r, w := utf8.DecodeRune(p.src[i:])
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		i += w
	}
	return &SyntaxError{Format: JSON, Line: line, Column: col, Msg: fmt.Sprintf(format, args...)}
}

func (p *jsonParser) describe() string {
	if p.pos >= len(p.src) {
		return "end of file"
	}
	r, _ := utf8.DecodeRune(p.src[p.pos:])
	return strconv.QuoteRune(r)
}

func (p *jsonParser) space() {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jsonParser) value() (*jsonNode, error) {
	if p.pos >= len(p.src) {
		return nil, p.errorf("unexpected end of file, want a value")
	}
	start := p.pos
	switch c := p.src[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		if _, err := p.str(); err != nil {
			return nil, err
		}
		return &jsonNode{kind: '"', start: start, end: p.pos}, nil
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(p.src[p.pos:], []byte(lit)) {
				p.pos += len(lit)
				return &jsonNode{kind: c, start: start, end: p.pos}, nil
			}
		}
	}
	return nil, p.errorf("unexpected %s, want a value", p.describe())
}

// container parses an object or array starting at p.pos; entry reads one
// member or item into n and leaves p.pos after it.
func (p *jsonParser) container(kind, closing byte, entry func(n *jsonNode) error) (*jsonNode, error) {
	p.depth++
	if p.depth > maxJSONDepth {
		return nil, p.errorf("nesting deeper than %d levels", maxJSONDepth)
	}
	defer func() { p.depth-- }()
	n := &jsonNode{kind: kind, start: p.pos}
	p.pos++
	p.space()
	if p.pos < len(p.src) && p.src[p.pos] == closing {
		p.pos++
		n.end = p.pos
		return n, nil
	}
	for {
		if err := entry(n); err != nil {
			return nil, err
		}
		p.space()
		if p.pos >= len(p.src) {
			return nil, p.errorf("unexpected end of file, want ',' or '%c'", closing)
		}
		switch p.src[p.pos] {
		case ',':
			p.pos++
			p.space()
			continue
		case closing:
			p.pos++
			n.end = p.pos
			return n, nil
		}
		return nil, p.errorf("unexpected %s, want ',' or '%c'", p.describe(), closing)
	}
}

func (p *jsonParser) object() (*jsonNode, error) { return p.container('{', '}', p.member) }

func (p *jsonParser) array() (*jsonNode, error) {
	return p.container('[', ']', func(n *jsonNode) error {
		v, err := p.value()
		if err == nil {
			n.items = append(n.items, v)
		}
		return err
	})
}

// member reads `"key": value` into object n.
func (p *jsonParser) member(n *jsonNode) error {
	if p.pos >= len(p.src) || p.src[p.pos] != '"' {
		return p.errorf("unexpected %s, want a string key", p.describe())
	}
	ks := p.pos
	key, err := p.str()
	if err != nil {
		return err
	}
	ke := p.pos
	p.space()
	if p.pos >= len(p.src) || p.src[p.pos] != ':' {
		return p.errorf("unexpected %s, want ':' after key %q", p.describe(), key)
	}
	p.pos++
	p.space()
	v, err := p.value()
	if err != nil {
		return err
	}
	n.members = append(n.members, jsonMember{key: key, keyStart: ks, keyEnd: ke, value: v})
	return nil
}

// str scans a string starting at the opening quote and returns its value.
func (p *jsonParser) str() (string, error) {
	start := p.pos
	p.pos++
	escaped := false
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == '"':
			p.pos++
			raw := p.src[start:p.pos]
			if !escaped {
				return string(raw[1 : len(raw)-1]), nil
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return "", p.errorf("bad string: %v", err)
			}
			return s, nil
		case c == '\\':
			escaped = true
			if p.pos+1 >= len(p.src) {
				return "", p.errorf("unexpected end of file in a string")
			}
			switch e := p.src[p.pos+1]; e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.pos += 2
			case 'u':
				if p.pos+6 > len(p.src) || !isHex4(p.src[p.pos+2:p.pos+6]) {
					p.pos++
					return "", p.errorf("bad \\u escape in a string")
				}
				p.pos += 6
			default:
				p.pos++
				return "", p.errorf("bad escape \\%c in a string", e)
			}
		case c < 0x20:
			return "", p.errorf("control character %#02x in a string (escape it)", c)
		default:
			p.pos++
		}
	}
	return "", p.errorf("unexpected end of file in a string")
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

func (p *jsonParser) number() (*jsonNode, error) {
	start := p.pos
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		if c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			p.pos++
			continue
		}
		break
	}
	if !isJSONNumber(string(p.src[start:p.pos])) {
		p.pos = start
		return nil, p.errorf("bad number %q", numberText(p.src[start:]))
	}
	return &jsonNode{kind: '0', start: start, end: p.pos}, nil
}

func numberText(b []byte) string {
	i := 0
	for i < len(b) && i < 40 && !bytes.ContainsRune([]byte(" \t\r\n,]}"), rune(b[i])) {
		i++
	}
	return string(b[:i])
}

func jsonKind(n *jsonNode) string {
	switch n.kind {
	case '{':
		return "map"
	case '[':
		return "list"
	case '"':
		return "string"
	case '0':
		return "number"
	case 't', 'f':
		return "boolean"
	}
	return "null"
}

// jsonStyle is the layout detected in the file, used for new text.
type jsonStyle struct {
	unit   string // one level of indentation
	colon  string // between a key and its value, e.g. ": "
	nl     string
	pretty bool // the document spans several lines
}

func detectJSONStyle(src []byte, root *jsonNode) *jsonStyle {
	st := &jsonStyle{unit: "  ", colon: ": ", nl: "\n"}
	if i := bytes.IndexByte(src, '\n'); i > 0 && src[i-1] == '\r' {
		st.nl = "\r\n"
	}
	st.pretty = (root.kind == '{' || root.kind == '[') &&
		(root.end-root.start == 2 || bytes.ContainsAny(src[root.start:root.end], "\n\r"))
	colonFound, unitFound := false, false
	var walk func(n *jsonNode, depth int)
	walk = func(n *jsonNode, depth int) {
		if depth > 100 || colonFound && unitFound {
			return
		}
		var first int = -1
		if len(n.members) > 0 {
			m := n.members[0]
			if !colonFound {
				sep := string(src[m.keyEnd:m.value.start])
				if strings.Trim(sep, " \t") == ":" {
					st.colon, colonFound = sep, true
				}
			}
			first = m.keyStart
		} else if len(n.items) > 0 {
			first = n.items[0].start
		}
		if first >= 0 && !unitFound && bytes.ContainsAny(src[n.start:first], "\n") {
			outer, inner := lineIndent(src, n.start), lineIndent(src, first)
			if strings.HasPrefix(inner, outer) && len(inner) > len(outer) {
				st.unit, unitFound = inner[len(outer):], true
			}
		}
		for _, m := range n.members {
			walk(m.value, depth+1)
		}
		for _, it := range n.items {
			walk(it, depth+1)
		}
	}
	walk(root, 0)
	return st
}

// lineIndent returns the leading blanks of the line holding p.
func lineIndent(src []byte, p int) string {
	ls := bytes.LastIndexByte(src[:p], '\n') + 1
	q := ls
	for q < p && (src[q] == ' ' || src[q] == '\t') {
		q++
	}
	return string(src[ls:q])
}

func sameJSONLine(src []byte, a, b int) bool {
	if a > b {
		a, b = b, a
	}
	return !bytes.ContainsAny(src[a:b], "\n\r")
}

// applyJSON applies the changes one at a time, each checked against the
// decoded document with the same logical change made.
func applyJSON(src []byte, cs []prepared) ([]byte, error) {
	text := src
	if len(bytes.TrimSpace(text)) == 0 {
		text = []byte("{}\n")
	}
	root, err := parseJSONText(text)
	if err != nil {
		return nil, err
	}
	cur, err := decodeJSONValue(text)
	if err != nil {
		return nil, &SyntaxError{Format: JSON, Msg: err.Error()}
	}
	st := detectJSONStyle(text, root)
	text, err = applyEach(text, cs, func(c prepared, current []byte) (*splices, error) {
		e := &jsonEditor{src: current, st: st, c: c}
		if err := setPath(e, c, e.slot(root, st.pretty, nil)); err != nil {
			return nil, err
		}
		return &e.ed, nil
	}, func(c prepared, out []byte) error {
		root2, err := parseJSONText(out)
		if err != nil {
			return fmt.Errorf("%w: result does not parse: %v", errEditCheck, err)
		}
		got, err := decodeJSONValue(out)
		if err := sameResult(setAny(cur, c.path, c.value), got, err); err != nil {
			return err
		}
		root, cur = root2, got
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(src)) == 0 && bytes.Equal(text, []byte("{}\n")) {
		return src, nil
	}
	return text, nil
}

func decodeJSONValue(b []byte) (any, error) {
	b = bytes.TrimPrefix(b, []byte("\xEF\xBB\xBF"))
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return canonicalJSON(v), nil
}

// canonicalJSON turns json.Number into canonical numbers.
func canonicalJSON(v any) any {
	switch v := v.(type) {
	case json.Number:
		c, err := canonicalNumber(string(v))
		if err != nil {
			return string(v)
		}
		return c
	case []any:
		for i, x := range v {
			v[i] = canonicalJSON(x)
		}
	case map[string]any:
		for k, x := range v {
			v[k] = canonicalJSON(x)
		}
	}
	return v
}

// setAny is the logical model of a change on decoded data.
func setAny(root any, p keyPath, v any) any {
	if len(p) == 0 {
		return v
	}
	seg := p[0]
	if seg.isIndex {
		l, _ := root.([]any)
		if seg.index < len(l) {
			l[seg.index] = setAny(l[seg.index], p[1:], v)
			return l
		}
		return append(l, setAny(nil, p[1:], v))
	}
	m, ok := root.(map[string]any)
	if !ok {
		m = map[string]any{}
	}
	m[seg.key] = setAny(m[seg.key], p[1:], v)
	return m
}

// jsonEditor turns one change into splices; it is the JSON docTree of the
// shared walk (walk.go).
type jsonEditor struct {
	src []byte
	st  *jsonStyle
	c   prepared
	ed  splices
}

// jslot is a value and whether its container is laid out over several lines.
type jslot struct {
	node  *jsonNode
	multi bool
	inner bool // the value is an object or array laid out over several lines
	at    keyPath
}

// slot makes the slot of n; containerMulti is the inner of its container.
// inner is worked out once here, not once per entry while walking them.
func (e *jsonEditor) slot(n *jsonNode, containerMulti bool, at keyPath) jslot {
	return jslot{node: n, multi: containerMulti, inner: (n.kind == '{' || n.kind == '[') && e.isMulti(n), at: at}
}

func (e *jsonEditor) isMulti(n *jsonNode) bool {
	return !sameJSONLine(e.src, n.start, n.end)
}

func (e *jsonEditor) shape(s jslot) nodeShape {
	switch s.node.kind {
	case 'n':
		return shapeNull
	case '{':
		return shapeMap
	case '[':
		return shapeList
	}
	return shapeScalar
}

func (e *jsonEditor) kindName(s jslot) string        { return jsonKind(s.node) }
func (e *jsonEditor) location(s jslot) keyPath       { return s.at }
func (e *jsonEditor) blocked(jslot, keyPath) error   { return nil }
func (e *jsonEditor) items(s jslot) int              { return len(s.node.items) }
func (e *jsonEditor) lookup(s jslot, key string) int { return lastMember(s.node, key) }

func (e *jsonEditor) inherited(jslot, keyPath, int) (bool, error) { return false, nil }

func (e *jsonEditor) item(s jslot, i int) (jslot, error) {
	return e.slot(s.node.items[i], s.inner, s.at.child(segment{index: i, isIndex: true})), nil
}

func (e *jsonEditor) member(s jslot, i int) (jslot, error) {
	mem := s.node.members[i]
	return e.slot(mem.value, s.inner, s.at.child(segment{key: mem.key})), nil
}

// memberKeys refuses an object with a repeated key: it is rewritten whole.
func (e *jsonEditor) memberKeys(s jslot) ([]string, bool) {
	keys := make([]string, len(s.node.members))
	seen := make(map[string]bool, len(keys))
	for i, mem := range s.node.members {
		if seen[mem.key] {
			return nil, false
		}
		seen[mem.key] = true
		keys[i] = mem.key
	}
	return keys, true
}

// lastMember finds key in object n; with duplicate keys the last one wins,
// as in encoding/json.
func lastMember(n *jsonNode, key string) int {
	for i := len(n.members) - 1; i >= 0; i-- {
		if n.members[i].key == key {
			return i
		}
	}
	return -1
}

func (e *jsonEditor) holds(s jslot, v any) (bool, error) {
	have, err := decodeJSONValue(e.src[s.node.start:s.node.end])
	return err == nil && valuesEqual(have, v), nil
}

func (e *jsonEditor) replace(s jslot, v any) error {
	text, err := e.render(v, lineIndent(e.src, s.node.start), s.multi && e.st.pretty)
	if err != nil {
		return e.c.valueErr(err)
	}
	e.ed.replace(s.node.start, s.node.end, text)
	return nil
}

// prettyLike says whether a new object or array next to sibling is spread
// over lines: like the sibling when it is an object or array itself,
// otherwise like its container.
func (e *jsonEditor) prettyLike(sibling *jsonNode, containerMulti bool) bool {
	if sibling.kind == '{' || sibling.kind == '[' {
		return e.isMulti(sibling) && e.st.pretty
	}
	return containerMulti && e.st.pretty
}

// commaSep is the separator between items of a one-line container.
func (e *jsonEditor) commaSep(n *jsonNode) string {
	var prevEnd, nextStart int
	switch {
	case len(n.members) >= 2:
		prevEnd, nextStart = n.members[0].value.end, n.members[1].keyStart
	case len(n.items) >= 2:
		prevEnd, nextStart = n.items[0].end, n.items[1].start
	default:
		if strings.HasSuffix(e.st.colon, " ") {
			return ", "
		}
		return ","
	}
	sep := string(e.src[prevEnd:nextStart])
	if strings.Trim(sep, " \t") != "," {
		return ", "
	}
	return sep
}

func (e *jsonEditor) insertMembers(s jslot, kvs []kv) error {
	n := s.node
	if len(n.members) == 0 {
		return e.replaceOrdered(s, kvs)
	}
	last := n.members[len(n.members)-1]
	return e.appendEntries(n, last.keyStart, last.value, len(kvs), func(i int, ind string, pretty bool) (string, error) {
		val, err := e.render(kvs[i].value, ind, pretty)
		return jsonString(kvs[i].key) + e.st.colon + val, err
	})
}

func (e *jsonEditor) appendItems(s jslot, items []any) error {
	n := s.node
	if len(n.items) == 0 {
		return e.replace(s, items)
	}
	last := n.items[len(n.items)-1]
	return e.appendEntries(n, last.start, last, len(items), func(i int, ind string, pretty bool) (string, error) {
		return e.render(items[i], ind, pretty)
	})
}

// appendEntries writes count new members or items after the last one of
// container n, which starts at lastStart and whose value is lastValue: each
// on a line of its own when the container's entries are, otherwise after the
// container's separator. entry renders entry i with ind as the indentation of
// its line.
func (e *jsonEditor) appendEntries(n *jsonNode, lastStart int, lastValue *jsonNode, count int, entry func(i int, ind string, pretty bool) (string, error)) error {
	multi := !sameJSONLine(e.src, n.start, lastStart)
	pretty := e.prettyLike(lastValue, multi)
	ind := lineIndent(e.src, lastStart)
	var b strings.Builder
	for i := range count {
		text, err := entry(i, ind, pretty)
		if err != nil {
			return e.c.valueErr(err)
		}
		if multi {
			b.WriteString("," + e.st.nl + ind)
		} else {
			b.WriteString(e.commaSep(n))
		}
		b.WriteString(text)
	}
	e.ed.insert(lastValue.end, b.String())
	return nil
}

// replaceOrdered writes an empty object anew with members in the given order.
func (e *jsonEditor) replaceOrdered(s jslot, kvs []kv) error {
	n := s.node
	base := lineIndent(e.src, n.start)
	pretty := s.multi && e.st.pretty
	parts := make([]string, len(kvs))
	for i, x := range kvs {
		ind := base + e.st.unit
		if !pretty {
			ind = ""
		}
		val, err := e.render(x.value, ind, pretty)
		if err != nil {
			return e.c.valueErr(err)
		}
		parts[i] = jsonString(x.key) + e.st.colon + val
	}
	e.ed.replace(n.start, n.end, e.wrap('{', '}', parts, base, pretty))
	return nil
}

func (e *jsonEditor) wrap(open, close byte, parts []string, base string, pretty bool) string {
	if len(parts) == 0 {
		return string([]byte{open, close})
	}
	if !pretty {
		sep := ","
		if strings.HasSuffix(e.st.colon, " ") {
			sep = ", "
		}
		return string(open) + strings.Join(parts, sep) + string(close)
	}
	ind := base + e.st.unit
	return string(open) + e.st.nl + ind + strings.Join(parts, ","+e.st.nl+ind) + e.st.nl + base + string(close)
}

// render writes v as JSON; pretty values put each entry on its own line, with
// base as the indentation of the line the value starts on.
func (e *jsonEditor) render(v any, base string, pretty bool) (string, error) {
	switch x := v.(type) {
	case map[string]any:
		keys := sortedKeys(x)
		parts := make([]string, len(keys))
		for i, k := range keys {
			val, err := e.render(x[k], base+e.st.unit, pretty)
			if err != nil {
				return "", err
			}
			parts[i] = jsonString(k) + e.st.colon + val
		}
		return e.wrap('{', '}', parts, base, pretty), nil
	case []any:
		parts := make([]string, len(x))
		for i, it := range x {
			val, err := e.render(it, base+e.st.unit, pretty)
			if err != nil {
				return "", err
			}
			parts[i] = val
		}
		return e.wrap('[', ']', parts, base, pretty), nil
	case string:
		return jsonString(x), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "", fmt.Errorf("%v cannot be written in JSON", x)
		}
	}
	if text, ok := scalarText(v); ok {
		return text, nil
	}
	return "", fmt.Errorf("values of type %T cannot be written", v)
}

// jsonString quotes s as JSON without escaping <, > and & (the file is not HTML).
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}
