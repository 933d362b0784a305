package fileedit

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// scalarHint is how an existing scalar was written; new text follows it when
// the new value allows.
type scalarHint int

const (
	hintNone scalarHint = iota // a new value: plain when safe
	hintPlain
	hintDouble
	hintSingle
	hintLiteral
	hintFolded
)

func hintOf(n *yaml.Node) scalarHint {
	if n == nil || n.Kind != yaml.ScalarNode {
		return hintNone
	}
	switch {
	case n.Style&yaml.DoubleQuotedStyle != 0:
		return hintDouble
	case n.Style&yaml.SingleQuotedStyle != 0:
		return hintSingle
	case n.Style&yaml.LiteralStyle != 0:
		return hintLiteral
	case n.Style&yaml.FoldedStyle != 0:
		return hintFolded
	case n.Value == "":
		return hintNone
	}
	return hintPlain
}

// yamlStyle is the layout detected in the file, used for new lines.
type yamlStyle struct {
	unit      int    // indentation of a nested map relative to its parent key
	seqIndent int    // indentation of a block list relative to its parent key (0 = "indentless")
	quote     byte   // quote for strings that cannot be plain: '"' or '\''
	nl        string // line break: "\n" or "\r\n"
}

// detectYAMLStyle takes the most common indentation steps and quote style of
// the file; files without examples get 2 spaces, indented lists and double
// quotes.
func detectYAMLStyle(t *yamlText) *yamlStyle {
	st := &yamlStyle{unit: 2, seqIndent: 2, quote: '"', nl: "\n"}
	if i := indexBreak(t.src); i >= 0 && t.src[i] == '\r' && i+1 < len(t.src) && t.src[i+1] == '\n' {
		st.nl = "\r\n"
	}
	units := map[int]int{}
	seqs := map[int]int{}
	doubles, singles := 0, 0
	var walk func(n *yaml.Node, depth int)
	walk = func(n *yaml.Node, depth int) {
		if n == nil || depth > 200 {
			return
		}
		switch n.Kind {
		case yaml.ScalarNode:
			if n.Style&yaml.DoubleQuotedStyle != 0 {
				doubles++
			} else if n.Style&yaml.SingleQuotedStyle != 0 {
				singles++
			}
		case yaml.MappingNode:
			if n.Style&yaml.FlowStyle == 0 && len(n.Content) > 0 {
				col := t.col(t.contentStart(n))
				for i := 1; i < len(n.Content); i += 2 {
					v := n.Content[i]
					if !isBlockCollection(v) || len(v.Content) == 0 {
						continue
					}
					vs := t.contentStart(v)
					if t.sameLine(vs, t.nodeStart(n.Content[i-1])) {
						continue
					}
					d := t.col(vs) - col
					if v.Kind == yaml.MappingNode && d > 0 {
						units[d]++
					} else if v.Kind == yaml.SequenceNode && d >= 0 {
						seqs[d]++
					}
				}
			}
		}
		for _, c := range n.Content {
			walk(c, depth+1)
		}
	}
	for _, d := range t.docs {
		walk(d, 0)
	}
	if u := mostCommon(units); u > 0 && u <= 8 {
		st.unit = u
	}
	st.seqIndent = st.unit
	if s := mostCommon(seqs); s >= 0 && s <= 8 {
		st.seqIndent = s
	}
	if singles > doubles {
		st.quote = '\''
	}
	return st
}

func indexBreak(b []byte) int {
	for i := range b {
		if breakLen(b, i) > 0 {
			return i
		}
	}
	return -1
}

func mostCommon(m map[int]int) int {
	best, n := -1, 0
	for k, c := range m {
		if c > n || c == n && k < best {
			best, n = k, c
		}
	}
	return best
}

// rawSafe reports whether r may appear unescaped in a YAML scalar of one line.
func rawSafe(r rune) bool {
	switch {
	case r == '\t', r >= 0x20 && r <= 0x7E:
		return true
	case r >= 0xA0 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD && r != 0xFEFF:
		return true
	case r >= 0x10000 && r <= 0x10FFFF:
		return true
	}
	return false
}

// yamlEscapes are the short escapes of a YAML double-quoted scalar.
var yamlEscapes = map[rune]string{
	'"': `\"`, '\\': `\\`, '\n': `\n`, '\t': `\t`, '\r': `\r`, 0: `\0`, 0x07: `\a`, 0x08: `\b`,
	0x0B: `\v`, 0x0C: `\f`, 0x1B: `\e`, 0x85: `\N`, 0x2028: `\L`, 0x2029: `\P`,
}

func doubleQuote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		if esc, ok := yamlEscapes[r]; ok {
			b.WriteString(esc)
			continue
		}
		switch {
		case rawSafe(r):
			b.WriteRune(r)
		case r <= 0xFF:
			fmt.Fprintf(&b, `\x%02X`, r)
		case r <= 0xFFFF:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			fmt.Fprintf(&b, `\U%08X`, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// singleQuote quotes s with single quotes when every character can be written
// raw on one line.
func singleQuote(s string) (string, bool) {
	for _, r := range s {
		if !rawSafe(r) {
			return "", false
		}
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'", true
}

// plainSafe reports whether s can be written without quotes and still read
// back as the same string, by YAML 1.2 parsers and by YAML 1.1 ones (which
// read yes, on, 0777, 1:20 and dates as other types).
func plainSafe(s string, flow bool) bool {
	if s == "" || isBlank(s[0]) || isBlank(s[len(s)-1]) {
		return false
	}
	for _, r := range s {
		if r == '\t' || !rawSafe(r) {
			return false
		}
	}
	switch c := s[0]; c {
	case '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`':
		return false
	case '-':
		if len(s) == 1 || isBlank(s[1]) || strings.HasPrefix(s, "---") {
			return false
		}
	}
	if strings.Contains(s, ": ") || strings.Contains(s, " #") || strings.HasSuffix(s, ":") {
		return false
	}
	if flow && strings.ContainsAny(s, ",[]{}?") {
		return false
	}
	if yaml11Special(s) {
		return false
	}
	// Last word to the parser itself.
	var v any
	if err := yaml.Unmarshal([]byte("k: "+s+"\n"), &v); err != nil {
		return false
	}
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return false
	}
	got, ok := m["k"].(string)
	return ok && got == s
}

// yaml11Special matches the plain scalars that YAML 1.1 parsers (PyYAML,
// go-yaml v2, Ruby) or YAML 1.2 ones resolve to something other than a string;
// yaml.v3 itself is asked afterwards by plainSafe.
func yaml11Special(s string) bool {
	switch strings.ToLower(s) {
	case "~", "null", "y", "yes", "n", "no", "true", "false", "on", "off", "<<", "=":
		return true
	}
	return yaml11Number.MatchString(s)
}

var yaml11Number = regexp.MustCompile(`^(?:` +
	`[-+]?(?:0|[1-9][0-9_]*)` + // decimal
	`|[-+]?0[0-7_]+|[-+]?0o[0-7_]+|[-+]?0x[0-9a-fA-F_]+|[-+]?0b[01_]+` + // other bases
	`|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?` + // sexagesimal
	`|[-+]?(?:[0-9][0-9_]*)?\.[0-9_]*(?:[eE][-+]?[0-9]+)?` + // float
	`|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+` +
	`|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)` +
	`|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt ].*)?` + // timestamp
	`)$`)

// writer renders new YAML text in the file's style.
type yamlWriter struct {
	st *yamlStyle
	// noNewBlocks is set while rendering text that an indented comment or
	// a blank-but-not-empty line will follow: such a line would become part
	// of a new block scalar, so multi-line strings are double-quoted.
	noNewBlocks bool
}

// scalar renders a scalar on one line, following hint for strings.
func (w *yamlWriter) scalar(v any, hint scalarHint, flow bool) string {
	switch v := v.(type) {
	case string:
		return w.str(v, hint, flow)
	case float64:
		switch {
		case math.IsNaN(v):
			return ".nan"
		case math.IsInf(v, 1):
			return ".inf"
		case math.IsInf(v, -1):
			return "-.inf"
		}
	}
	if text, ok := scalarText(v); ok {
		return text
	}
	return fmt.Sprint(v)
}

func (w *yamlWriter) str(s string, hint scalarHint, flow bool) string {
	switch hint {
	case hintDouble:
		return doubleQuote(s)
	case hintSingle:
		if q, ok := singleQuote(s); ok {
			return q
		}
		return doubleQuote(s)
	}
	if plainSafe(s, flow) {
		return s
	}
	if w.st.quote == '\'' {
		if q, ok := singleQuote(s); ok {
			return q
		}
	}
	return doubleQuote(s)
}

// key renders a map key; hint is the style of the sibling keys.
func (w *yamlWriter) key(k string, hint scalarHint, flow bool) (string, error) {
	var out string
	switch hint {
	case hintDouble, hintSingle:
		out = w.str(k, hint, flow)
	default:
		out = w.str(k, hintNone, flow)
	}
	if len(out) > 1000 {
		return "", fmt.Errorf("map key of %d bytes is too long for a YAML simple key", len(out))
	}
	return out, nil
}

// flow renders v in flow style ({a: 1, b: [x]}).
func (w *yamlWriter) flow(v any, hint scalarHint) (string, error) {
	switch v := v.(type) {
	case map[string]any:
		parts := make([]string, 0, len(v))
		for _, k := range sortedKeys(v) {
			kt, err := w.key(k, hintNone, true)
			if err != nil {
				return "", err
			}
			vt, err := w.flow(v[k], hintNone)
			if err != nil {
				return "", err
			}
			parts = append(parts, kt+": "+vt)
		}
		return "{" + strings.Join(parts, ", ") + "}", nil
	case []any:
		parts := make([]string, 0, len(v))
		for _, x := range v {
			vt, err := w.flow(x, hintNone)
			if err != nil {
				return "", err
			}
			parts = append(parts, vt)
		}
		return "[" + strings.Join(parts, ", ") + "]", nil
	case string:
		if hint == hintLiteral || hint == hintFolded {
			hint = hintNone
		}
		return w.str(v, hint, true), nil
	}
	return w.scalar(v, hint, true), nil
}

// blockable reports whether s can be written as a literal block scalar with
// clip or strip chomping.
func blockable(s string) bool {
	body := strings.TrimSuffix(s, "\n")
	if body == "" || strings.HasSuffix(body, "\n") {
		return false // empty, or several trailing newlines (keep chomping would swallow blank lines)
	}
	for _, r := range body {
		if r != '\n' && !rawSafe(r) {
			return false
		}
	}
	return true
}

// useBlock decides whether string value v is written as a block scalar.
// inPlace means an existing block scalar is rewritten with its own
// indentation.
func (w *yamlWriter) useBlock(v any, hint scalarHint, flow, inPlace bool) bool {
	s, ok := v.(string)
	if !ok || flow || !blockable(s) || w.noNewBlocks && !inPlace {
		return false
	}
	switch hint {
	case hintLiteral, hintFolded:
		return true
	case hintNone, hintPlain:
		return strings.Contains(strings.TrimSuffix(s, "\n"), "\n")
	}
	return false
}

// block renders s as a block scalar: the header ("|-", ">", "|2", ...) and the
// content lines at column contentCol. parentIndent is the column of the
// enclosing block collection, needed for an explicit indentation indicator.
func (w *yamlWriter) block(s string, hint scalarHint, contentCol, parentIndent int) (string, []string, bool) {
	body := strings.TrimSuffix(s, "\n")
	lines := strings.Split(body, "\n")
	style := "|"
	if hint == hintFolded && len(lines) == 1 {
		style = ">"
	}
	header := style
	for _, l := range lines {
		if l == "" {
			continue
		}
		if isBlank(l[0]) {
			ind := contentCol - max(parentIndent, 0)
			if parentIndent < 0 {
				ind = contentCol
			}
			if ind < 1 || ind > 9 {
				return "", nil, false
			}
			header += strconv.Itoa(ind)
		}
		break
	}
	if !strings.HasSuffix(s, "\n") {
		header += "-"
	}
	pad := strings.Repeat(" ", contentCol)
	out := make([]string, len(lines))
	for i, l := range lines {
		if l != "" {
			out[i] = pad + l
		}
	}
	return header, out, true
}

// valueLines renders v after prefix, which ends with "key:" or "-"; col is
// the column of that key or dash. item says prefix is a list dash, which lets
// a map or list start on the same line ("- name: x").
func (w *yamlWriter) valueLines(prefix string, v any, hint scalarHint, col int, item bool) ([]string, error) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			return []string{prefix + " {}"}, nil
		}
		if item {
			lines, err := w.mapLines(x, col+2)
			if err != nil {
				return nil, err
			}
			lines[0] = prefix + " " + lines[0][col+2:]
			return lines, nil
		}
		lines, err := w.mapLines(x, col+w.st.unit)
		if err != nil {
			return nil, err
		}
		return append([]string{prefix}, lines...), nil
	case []any:
		if len(x) == 0 {
			return []string{prefix + " []"}, nil
		}
		if item {
			lines, err := w.listLines(x, hintNone, col+2)
			if err != nil {
				return nil, err
			}
			lines[0] = prefix + " " + lines[0][col+2:]
			return lines, nil
		}
		lines, err := w.listLines(x, hintNone, col+w.st.seqIndent)
		if err != nil {
			return nil, err
		}
		return append([]string{prefix}, lines...), nil
	}
	if w.useBlock(v, hintNone, false, false) {
		if header, lines, ok := w.block(v.(string), hintNone, col+w.st.unit, col); ok {
			return append([]string{prefix + " " + header}, lines...), nil
		}
	}
	return []string{prefix + " " + w.scalar(v, hint, false)}, nil
}

// memberLines renders a new "key: value" member with the key at column col;
// the hints are the styles of the sibling keys and values.
func (w *yamlWriter) memberLines(k string, keyHint, valHint scalarHint, v any, col int) ([]string, error) {
	kt, err := w.key(k, keyHint, false)
	if err != nil {
		return nil, err
	}
	return w.valueLines(strings.Repeat(" ", col)+kt+":", v, valHint, col, false)
}

func (w *yamlWriter) mapLines(m map[string]any, col int) ([]string, error) {
	var out []string
	for _, k := range sortedKeys(m) {
		lines, err := w.memberLines(k, hintNone, hintNone, m[k], col)
		if err != nil {
			return nil, err
		}
		out = append(out, lines...)
	}
	return out, nil
}

func (w *yamlWriter) listLines(l []any, hint scalarHint, dashCol int) ([]string, error) {
	var out []string
	for _, x := range l {
		lines, err := w.valueLines(strings.Repeat(" ", dashCol)+"-", x, hint, dashCol, true)
		if err != nil {
			return nil, err
		}
		out = append(out, lines...)
	}
	return out, nil
}

// collectionLines renders a non-empty map or list as block lines at col.
func (w *yamlWriter) collectionLines(v any, col int) ([]string, error) {
	if m, ok := v.(map[string]any); ok {
		return w.mapLines(m, col)
	}
	return w.listLines(v.([]any), hintNone, col)
}

func isNonEmptyCollection(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		return len(v) > 0
	case []any:
		return len(v) > 0
	}
	return false
}

// keptProps returns the properties to write before the new value: the anchor
// always, the tag only when it still describes the value.
func keptProps(pr nodeProps, v any) string {
	var parts []string
	if pr.anchor != "" {
		parts = append(parts, pr.anchor)
	}
	if pr.tag != "" {
		t, _ := valueKind(v)
		if pr.tag == t || pr.tag == "!<tag:yaml.org,2002:"+strings.TrimPrefix(t, "!!")+">" {
			parts = append(parts, pr.tag)
		}
	}
	return strings.Join(parts, " ")
}

func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, sep)
}

// siblingHint is the quoting of a sibling string value, which new string
// values copy (a list of quoted args stays quoted).
func siblingHint(n *yaml.Node) scalarHint {
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return hintNone
	}
	switch h := hintOf(n); h {
	case hintDouble, hintSingle:
		return h
	}
	return hintNone
}
