package fileedit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// yamlText is one parse of a YAML stream plus what is needed to turn the
// parser's line/column positions into byte offsets and to find where each
// node ends (yaml.v3 only records where nodes start).
type yamlText struct {
	src   []byte
	lines []int // lines[i] is the offset where line i+1 starts
	docs  []*yaml.Node
}

func parseYAMLText(src []byte) (*yamlText, error) {
	if bytes.HasPrefix(src, []byte{0xFE, 0xFF}) || bytes.HasPrefix(src, []byte{0xFF, 0xFE}) ||
		bytes.HasPrefix(src, []byte{0, 0, 0xFE, 0xFF}) {
		return nil, &SyntaxError{Format: YAML, Line: 1, Column: 1, Msg: "UTF-16/UTF-32 files are not supported; save the file as UTF-8"}
	}
	if !utf8.Valid(src) {
		line, col := lineColOf(src, firstInvalidUTF8(src))
		return nil, &SyntaxError{Format: YAML, Line: line, Column: col, Msg: "invalid UTF-8"}
	}
	docs, err := decodeYAMLNodes(src)
	if err != nil {
		return nil, err
	}
	t := &yamlText{src: src, docs: docs}
	start := 0
	if bytes.HasPrefix(src, []byte("\xEF\xBB\xBF")) {
		start = 3
	}
	t.lines = append(t.lines, start)
	for i := start; i < len(src); {
		if n := breakLen(src, i); n > 0 {
			i += n
			t.lines = append(t.lines, i)
			continue
		}
		i++
	}
	return t, nil
}

func decodeYAMLNodes(src []byte) (docs []*yaml.Node, err error) {
	defer func() {
		// yaml.v3 has panicked on hostile input in the past; a release file
		// must never take a worker down.
		if r := recover(); r != nil {
			docs, err = nil, &SyntaxError{Format: YAML, Msg: fmt.Sprintf("parser failure: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(src))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, yamlSyntaxError(err)
		}
		docs = append(docs, &n)
	}
}

// decodeYAMLValue decodes a node into plain Go values (aliases and merge keys
// resolved); it also detects duplicate keys, which the node parser accepts.
func decodeYAMLValue(n *yaml.Node) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, &SyntaxError{Format: YAML, Msg: fmt.Sprintf("decoder failure: %v", r)}
		}
	}()
	if err := n.Decode(&v); err != nil {
		return nil, yamlSyntaxError(err)
	}
	return v, nil
}

var yamlLineErr = regexp.MustCompile(`line (\d+): (.*)`)

func yamlSyntaxError(err error) *SyntaxError {
	msg := err.Error()
	if te, ok := err.(*yaml.TypeError); ok && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	if m := yamlLineErr.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &SyntaxError{Format: YAML, Line: line, Msg: m[2]}
	}
	if len(msg) > 6 && msg[:6] == "yaml: " {
		msg = msg[6:]
	}
	return &SyntaxError{Format: YAML, Msg: msg}
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, w := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && w <= 1 {
			return i
		}
		i += w
	}
	return len(b)
}

// lineColOf returns the 1-based line and byte column of offset off.
func lineColOf(src []byte, off int) (int, int) {
	line, start := 1, 0
	for i := 0; i < off && i < len(src); i++ {
		if src[i] == '\n' {
			line++
			start = i + 1
		}
	}
	return line, off - start + 1
}

// breakLen returns the length of the line break at b[i] (as yaml.v3 counts
// them: CRLF, CR, LF, NEL, LS, PS), or 0.
func breakLen(b []byte, i int) int {
	if i >= len(b) {
		return 0
	}
	switch b[i] {
	case '\n':
		return 1
	case '\r':
		if i+1 < len(b) && b[i+1] == '\n' {
			return 2
		}
		return 1
	case 0xC2:
		if i+1 < len(b) && b[i+1] == 0x85 {
			return 2
		}
	case 0xE2:
		if i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9) {
			return 3
		}
	}
	return 0
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// off converts a yaml.v3 position (1-based line, 1-based column counted in
// characters) to a byte offset.
func (t *yamlText) off(line, col int) int {
	if line < 1 {
		return 0
	}
	if line > len(t.lines) {
		return len(t.src)
	}
	p := t.lines[line-1]
	for c := 1; c < col && p < len(t.src); c++ {
		if breakLen(t.src, p) > 0 {
			break
		}
		_, w := utf8.DecodeRune(t.src[p:])
		p += w
	}
	return p
}

func (t *yamlText) nodeStart(n *yaml.Node) int { return t.off(n.Line, n.Column) }

// lineStart returns the offset of the start of the line holding p.
func (t *yamlText) lineStart(p int) int {
	i := sort.Search(len(t.lines), func(i int) bool { return t.lines[i] > p }) - 1
	if i < 0 {
		return 0
	}
	return t.lines[i]
}

// col returns the column (0-based, in bytes) of p. Block indentation is ASCII,
// so for block structure this equals yaml.v3's character column.
func (t *yamlText) col(p int) int { return p - t.lineStart(p) }

func (t *yamlText) sameLine(a, b int) bool { return t.lineStart(a) == t.lineStart(b) }

// lineEnd returns the offset of the line break (or EOF) ending the line of p.
func (t *yamlText) lineEnd(p int) int {
	for p < len(t.src) && breakLen(t.src, p) == 0 {
		p++
	}
	return p
}

// nextLine returns the start of the line after p's, and false at EOF.
func (t *yamlText) nextLine(p int) (int, bool) {
	e := t.lineEnd(p)
	if e >= len(t.src) {
		return len(t.src), false
	}
	return e + breakLen(t.src, e), true
}

func (t *yamlText) skipBlanks(p int) int {
	for p < len(t.src) && isBlank(t.src[p]) {
		p++
	}
	return p
}

// skipSpace skips blanks, line breaks and comments.
func (t *yamlText) skipSpace(p int) int {
	for p < len(t.src) {
		switch c := t.src[p]; {
		case isBlank(c):
			p++
		case c == '#':
			p = t.lineEnd(p)
		default:
			n := breakLen(t.src, p)
			if n == 0 {
				return p
			}
			p += n
		}
	}
	return p
}

// restOfLineBlank reports whether only blanks follow p on its line.
func (t *yamlText) restOfLineBlank(p int) bool {
	q := t.skipBlanks(p)
	return q >= len(t.src) || breakLen(t.src, q) > 0
}

func isEmptyScalar(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Value == "" &&
		n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0
}

func isBlockScalar(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0
}

func isFlowCollection(n *yaml.Node) bool {
	return (n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode) && n.Style&yaml.FlowStyle != 0
}

func isBlockCollection(n *yaml.Node) bool {
	return (n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode) && n.Style&yaml.FlowStyle == 0
}

// nodeProps locates the anchor and tag written before a node's content.
type nodeProps struct {
	start, end int // the properties are src[start:end]; start == end when none
	anchor     string
	tag        string
}

func (t *yamlText) props(n *yaml.Node) nodeProps {
	start := t.nodeStart(n)
	pr := nodeProps{start: start, end: start}
	// Properties start with '&' or '!', which a plain scalar cannot (and
	// yaml.v3 does not flag a lone "!" as TaggedStyle). A block map without
	// properties starts where its first key does, and that key may carry
	// properties of its own.
	if n.Kind == yaml.AliasNode || start >= len(t.src) || t.src[start] != '&' && t.src[start] != '!' {
		return pr
	}
	if n.Kind == yaml.MappingNode && n.Style&yaml.FlowStyle == 0 && len(n.Content) > 0 && t.nodeStart(n.Content[0]) == start {
		return pr
	}
	p := start
	seenAnchor, seenTag := false, false
	for p < len(t.src) {
		switch c := t.src[p]; {
		case c == '&' && !seenAnchor:
			q := p + 1
			for q < len(t.src) && isAnchorChar(t.src[q]) {
				q++
			}
			pr.anchor, seenAnchor = string(t.src[p:q]), true
			p = q
		case c == '!' && !seenTag:
			q := p + 1
			if q < len(t.src) && t.src[q] == '<' {
				for q < len(t.src) && t.src[q] != '>' && breakLen(t.src, q) == 0 {
					q++
				}
				if q < len(t.src) && t.src[q] == '>' {
					q++
				}
			} else {
				for q < len(t.src) && !isBlank(t.src[q]) && breakLen(t.src, q) == 0 {
					q++
				}
			}
			pr.tag, seenTag = string(t.src[p:q]), true
			p = q
		default:
			return pr
		}
		pr.end = p
		// The other property may follow on the same line, or on a later
		// one; on a later line only if the node has it (otherwise it belongs
		// to whatever comes next).
		if q := t.skipBlanks(p); q < len(t.src) && (t.src[q] == '&' && !seenAnchor || t.src[q] == '!' && !seenTag) {
			p = q
			continue
		}
		q := t.skipSpace(p)
		if q < len(t.src) && (t.src[q] == '&' && !seenAnchor && n.Anchor != "" ||
			t.src[q] == '!' && !seenTag && n.Style&yaml.TaggedStyle != 0) {
			p = q
			continue
		}
		return pr
	}
	return pr
}

func isAnchorChar(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '_' || c == '-'
}

// contentStart returns the offset of the node's content after its properties:
// the first character of a scalar, '{' or '[' of a flow collection, the first
// key or '-' of a block collection. An empty scalar's content starts (and
// ends) right after its properties.
func (t *yamlText) contentStart(n *yaml.Node) int {
	pr := t.props(n)
	if isEmptyScalar(n) {
		return pr.end
	}
	if pr.end == pr.start {
		return pr.start
	}
	return t.skipSpace(pr.end)
}

// end returns the offset just past the node's last character. indent is the
// column of the enclosing block collection (-1 at the root), which decides
// where plain and block scalars end; flow tells whether the node sits inside a
// flow collection.
func (t *yamlText) end(n *yaml.Node, indent int, flow bool) (int, error) {
	switch n.Kind {
	case yaml.AliasNode:
		return t.nodeStart(n) + 1 + len(n.Value), nil
	case yaml.ScalarNode:
		cs := t.contentStart(n)
		switch {
		case isEmptyScalar(n):
			return cs, nil
		case n.Style&yaml.DoubleQuotedStyle != 0:
			return t.doubleQuotedEnd(cs)
		case n.Style&yaml.SingleQuotedStyle != 0:
			return t.singleQuotedEnd(cs)
		case isBlockScalar(n):
			b, err := t.blockScalar(cs, indent)
			if err != nil {
				return 0, err
			}
			return b.contentEnd, nil
		}
		return t.plainEnd(cs, indent, flow), nil
	case yaml.MappingNode, yaml.SequenceNode:
		if n.Style&yaml.FlowStyle != 0 {
			if cs := t.contentStart(n); cs >= len(t.src) || t.src[cs] != '{' && t.src[cs] != '[' {
				return 0, fmt.Errorf("single-pair flow mapping without braces at line %d is not supported", n.Line)
			}
		}
		if len(n.Content) == 0 {
			if n.Style&yaml.FlowStyle == 0 {
				return 0, fmt.Errorf("empty block collection at line %d", n.Line)
			}
			return t.closingBracket(t.contentStart(n)+1, n)
		}
		last := n.Content[len(n.Content)-1]
		if n.Style&yaml.FlowStyle != 0 {
			e, err := t.end(last, -1, true)
			if err != nil {
				return 0, err
			}
			return t.closingBracket(e, n)
		}
		col := t.col(t.contentStart(n))
		if n.Kind == yaml.MappingNode && isEmptyScalar(last) && t.props(last).end == t.nodeStart(last) {
			// An empty value has no text; yaml.v3 places it after the ':'
			// or, for "? key" without one, at the next token. Measure from
			// the key instead.
			ke, err := t.end(n.Content[len(n.Content)-2], col, false)
			if err != nil {
				return 0, err
			}
			if p := t.skipSpace(ke); p < len(t.src) && t.src[p] == ':' {
				return p + 1, nil
			}
			return ke, nil
		}
		return t.end(last, col, false)
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return t.nodeStart(n), nil
		}
		return t.end(n.Content[0], -1, false)
	}
	return 0, fmt.Errorf("unexpected node kind %d at line %d", n.Kind, n.Line)
}

// closingBracket finds the '}' or ']' that closes flow collection n, starting
// after its last item; only white space, comments and a trailing comma may
// come first.
func (t *yamlText) closingBracket(p int, n *yaml.Node) (int, error) {
	want := byte('}')
	if n.Kind == yaml.SequenceNode {
		want = ']'
	}
	for {
		p = t.skipSpace(p)
		if p >= len(t.src) {
			return 0, fmt.Errorf("flow collection at line %d is not closed", n.Line)
		}
		switch t.src[p] {
		case want:
			return p + 1, nil
		case ',':
			p++
		default:
			return 0, fmt.Errorf("unexpected %q in flow collection at line %d", t.src[p], n.Line)
		}
	}
}

func (t *yamlText) doubleQuotedEnd(p int) (int, error) {
	for i := p + 1; i < len(t.src); i++ {
		switch t.src[i] {
		case '\\':
			i++
		case '"':
			return i + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated double-quoted string at byte %d", p)
}

func (t *yamlText) singleQuotedEnd(p int) (int, error) {
	for i := p + 1; i < len(t.src); i++ {
		if t.src[i] == '\'' {
			if i+1 < len(t.src) && t.src[i+1] == '\'' {
				i++
				continue
			}
			return i + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated single-quoted string at byte %d", p)
}

func isFlowIndicator(c byte) bool {
	return c == ',' || c == '[' || c == ']' || c == '{' || c == '}'
}

// plainEnd finds the end of a plain scalar starting at p, following it over
// continuation lines the way the YAML scanner does.
func (t *yamlText) plainEnd(p, indent int, flow bool) int {
	src := t.src
	end := p
	i := p
	for {
		// One line of the scalar.
		for i < len(src) && breakLen(src, i) == 0 {
			c := src[i]
			// The same stop rules as yaml.v3's scanner (which, unlike the
			// spec, lets "a:]" continue past the ':').
			if c == ':' && (i+1 >= len(src) || isBlank(src[i+1]) || breakLen(src, i+1) > 0) {
				return end
			}
			if c == '#' && i > p && isBlank(src[i-1]) {
				return end
			}
			if flow && (isFlowIndicator(c) || c == '?') {
				return end
			}
			_, w := utf8.DecodeRune(src[i:])
			if !isBlank(c) {
				end = i + w
			}
			i += w
		}
		// Is the next non-empty line a continuation?
		for {
			n := breakLen(src, i)
			if n == 0 {
				return end
			}
			i += n
			i = t.skipBlanks(i)
			if i >= len(src) {
				return end
			}
			if breakLen(src, i) == 0 {
				break
			}
		}
		if !flow && t.col(i) <= indent {
			return end
		}
		if src[i] == '#' || t.col(i) == 0 && isDocMarker(src, i) {
			return end
		}
	}
}

func isDocMarker(src []byte, p int) bool {
	if p+3 > len(src) {
		return false
	}
	m := string(src[p : p+3])
	if m != "---" && m != "..." {
		return false
	}
	return p+3 == len(src) || isBlank(src[p+3]) || breakLen(src, p+3) > 0
}

// blockInfo describes a literal or folded block scalar.
type blockInfo struct {
	start       int // the '|' or '>'
	headerEnd   int // end of the indicators ("|", "|-", ">+2", ...)
	lineEnd     int // end of the header line (before its break), after any comment
	contentEnd  int // end of the last content line; == lineEnd when there is none
	indent      int // content indentation (column)
	hasContent  bool
	explicitInd bool
}

// blockScalar scans a block scalar whose indicator is at p; indent is the
// column of the enclosing block collection (-1 at the root).
func (t *yamlText) blockScalar(p, indent int) (blockInfo, error) {
	src := t.src
	b := blockInfo{start: p}
	if p >= len(src) || (src[p] != '|' && src[p] != '>') {
		return b, fmt.Errorf("block scalar indicator not found at byte %d", p)
	}
	i := p + 1
	inc := 0
	for i < len(src) {
		c := src[i]
		if c == '+' || c == '-' {
			i++
			continue
		}
		if c >= '1' && c <= '9' {
			inc = int(c - '0')
			i++
			continue
		}
		break
	}
	b.headerEnd = i
	b.lineEnd = t.lineEnd(i)
	b.contentEnd = b.lineEnd
	if inc > 0 {
		b.explicitInd = true
		if indent >= 0 {
			b.indent = indent + inc
		} else {
			b.indent = inc
		}
	}
	line, ok := t.nextLine(i)
	if !ok {
		return b, nil
	}
	if !b.explicitInd {
		maxBlank := 0
		detected := -1
		for l, ok := line, true; ok; l, ok = t.nextLine(l) {
			q := l
			for q < len(src) && src[q] == ' ' {
				q++
			}
			if q >= len(src) || breakLen(src, q) > 0 {
				if q-l > maxBlank {
					maxBlank = q - l
				}
				if q >= len(src) {
					break
				}
				continue
			}
			detected = q - l
			break
		}
		b.indent = max(maxBlank, detected, indent+1, 1)
	}
	for l, ok := line, true; ok; l, ok = t.nextLine(l) {
		q := l
		for q < len(src) && src[q] == ' ' && q-l < b.indent {
			q++
		}
		if q-l < b.indent {
			if q >= len(src) || breakLen(src, q) > 0 {
				continue // an empty line inside or after the content
			}
			break // less indented: the scalar has ended
		}
		if q >= len(src) {
			break
		}
		if breakLen(src, q) > 0 {
			continue // exactly indented empty line
		}
		b.contentEnd = t.lineEnd(q)
		b.hasContent = true
	}
	return b, nil
}
