// Package yamlconf reads prflow's YAML configuration files (pipelines, connectors, tokens,
// webhooks, notifiers, OIDC, RBAC, the Harness map, --config) into typed structs. It is the
// one place that walks a file's structure: a file's own code declares a struct with `yaml:"name"` tags, calls
// Load (or Parse then Decode) and checks the decoded values, reporting what is wrong with
// Doc.Errorf at the path of the field. Every problem is collected, each as
// "file:line:col: field.path: what is wrong"; unknown and duplicate keys are refused.
//
// Decoding walks the node tree rather than using yaml.v3's KnownFields because KnownFields
// stops at the first unknown key and reports neither its column nor its path.
package yamlconf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agnivade/levenshtein"
	"go.yaml.in/yaml/v3"
)

// Error is one problem in a file, with where it is.
type Error struct {
	File   string
	Line   int
	Column int
	Field  string // e.g. connectors[1].auth.token
	Msg    string

	scope string // a schema violation's anyOf or oneOf (see AddUnrelated)
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
		if e.Column > 0 {
			loc += ":" + strconv.Itoa(e.Column)
		}
	}
	if e.Field != "" {
		return loc + ": " + e.Field + ": " + e.Msg
	}
	return loc + ": " + e.Msg
}

// Errors lists every problem found in one file, in file order. errors.As finds an *Error
// in it.
type Errors []*Error

func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap lets errors.As and errors.Is see each problem.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Limits bound what a file may cost to read: a configuration file is small, and a hostile
// one (huge, deeply nested, or an alias bomb) gets a clear error rather than the process's
// memory.
const (
	DefaultMaxBytes = 4 << 20
	// DefaultMaxDepth is the deepest nesting of mappings and lists decoded.
	DefaultMaxDepth = 64
	// DefaultMaxNodes bounds the nodes visited while decoding, aliases counted each time
	// they are followed.
	DefaultMaxNodes = 1 << 20
)

// Option changes how a file is read.
type Option func(*Doc)

// MaxBytes sets the largest file accepted.
func MaxBytes(n int) Option { return func(d *Doc) { d.maxBytes = n } }

// UnknownField sets how a key no field names is reported: msg gets the key and the known
// field names and returns the message (the default lists them after a typo hint). A file
// type whose messages people already know keeps its wording this way.
func UnknownField(msg func(key string, known []string) string) Option {
	return func(d *Doc) { d.unknown = msg }
}

// Doc is one parsed file: its node tree, the problems found so far, and the nodes decoded at
// each field path (so that checks after decoding can point at them).
type Doc struct {
	File string
	Root *yaml.Node // the document's value; nil for an empty file

	errs      Errors
	nodes     map[string]*yaml.Node
	keys      map[string]*yaml.Node
	maxBytes  int
	unknown   func(key string, known []string) string
	visited   int
	truncated bool // problems past MaxErrors were dropped
	json      struct {
		v        any
		ok, done bool
	} // the document as JSON values (jsonRoot)
}

// Parse reads src as one YAML document. A syntax error is reported at the line of the
// mistake (see SyntaxError); more than one document, or a file over the size limit, is an
// error. An empty file parses with a nil Root.
func Parse(file string, src []byte, opts ...Option) (*Doc, error) {
	d := &Doc{File: file, maxBytes: DefaultMaxBytes, nodes: map[string]*yaml.Node{}, keys: map[string]*yaml.Node{}}
	for _, o := range opts {
		o(d)
	}
	if len(src) > d.maxBytes {
		return nil, Errors{{File: file, Msg: fmt.Sprintf("file is %d bytes; the limit is %d", len(src), d.maxBytes)}}
	}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return d, nil
		}
		return nil, Errors{SyntaxError(file, src, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, Errors{{File: file, Line: extra.Line, Column: extra.Column, Msg: "more than one YAML document; the file holds one"}}
	}
	if len(doc.Content) > 0 {
		d.Root = doc.Content[0]
		if d.Root.Kind == yaml.ScalarNode && d.Root.Tag == "!!null" {
			d.Root = nil
		}
	}
	return d, nil
}

// Load parses src and decodes it into v (a pointer to a struct, list or map). want names
// what an empty file lacks ("a connectors list"); it is reported as "empty file: want ...".
// The Doc is nil only when the file could not be parsed; otherwise the caller goes on to
// check the values (Errorf) and returns d.Err().
func Load(file string, src []byte, v any, want string, opts ...Option) (*Doc, error) {
	d, err := Parse(file, src, opts...)
	if err != nil {
		return nil, err
	}
	if d.Root == nil {
		d.ErrorAt(nil, "", "empty file: want %s", want)
		return d, d.Err()
	}
	d.Decode(d.Root, "", v)
	return d, d.Err()
}

// Err returns the problems found, sorted by place in the file, or nil.
func (d *Doc) Err() error {
	if len(d.errs) == 0 {
		return nil
	}
	sort.SliceStable(d.errs, func(i, j int) bool {
		a, b := d.errs[i], d.errs[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	if d.truncated {
		return append(d.errs[:len(d.errs):len(d.errs)], &Error{File: d.File, Msg: fmt.Sprintf("more than %d problems; the rest are not shown", MaxErrors)})
	}
	return d.errs
}

// Failed reports whether any problem was found.
func (d *Doc) Failed() bool { return len(d.errs) > 0 }

// Count is the number of problems found so far (to tell whether a check added one).
func (d *Doc) Count() int { return len(d.errs) }

// MaxErrors bounds the problems kept for one file: past it a hostile file would only make
// the message longer.
const MaxErrors = 50

// ErrorAt records a problem at node n (or at the top of the file when n is nil).
func (d *Doc) ErrorAt(n *yaml.Node, field, format string, a ...any) {
	if len(d.errs) >= MaxErrors {
		d.truncated = true
		return
	}
	e := &Error{File: d.File, Field: field, Msg: fmt.Sprintf(format, a...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	d.errs = append(d.errs, e)
}

// Errorf records a problem at the value of field; for a field the file does not set, at
// the closest enclosing value that it does (a missing required key is reported at the
// mapping that lacks it).
func (d *Doc) Errorf(field, format string, a ...any) {
	d.ErrorAt(d.Near(field), field, format, a...)
}

// Bad reports whether a problem was recorded at field (so that a value that could not be
// decoded is not also reported as missing).
func (d *Doc) Bad(field string) bool {
	for _, e := range d.errs {
		if e.Field == field {
			return true
		}
	}
	return false
}

// Has reports whether the file sets field (to anything, null included).
func (d *Doc) Has(field string) bool { return d.nodes[field] != nil }

// Key returns the key node of field (where the key is written), or nil.
func (d *Doc) Key(field string) *yaml.Node { return d.keys[field] }

// Node returns the value node of field, or nil when the file does not set it.
func (d *Doc) Node(field string) *yaml.Node { return d.nodes[field] }

// Near returns the node of field or of its closest enclosing path that has one.
func (d *Doc) Near(field string) *yaml.Node {
	for p := field; ; p = parent(p) {
		if n := d.nodes[p]; n != nil {
			return n
		}
		if p == "" {
			return d.Root
		}
	}
}

// parent drops the last ".key" or "[i]" of a path.
func parent(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// Join appends key to path.
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Index appends [i] to path.
func Index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// Unmarshaler is implemented by types that read their own node (a value that may be a
// string or a mapping, say). Problems go to d with ErrorAt at path.
type Unmarshaler interface {
	UnmarshalYAMLConf(d *Doc, n *yaml.Node, path string)
}

var (
	unmarshalerType = reflect.TypeFor[Unmarshaler]()
	selfDecoderType = reflect.TypeFor[selfDecoder]()
	nodeType        = reflect.TypeFor[yaml.Node]()
	durationType    = reflect.TypeFor[time.Duration]()
)

// Decode reads n into v (a pointer), recording every problem at its place. Struct fields
// are named by their `yaml:"name"` tag (untagged fields by their name with the first letter
// lower-cased; `yaml:"-"` is skipped; `yaml:",inline"` on an embedded struct reads its
// fields as the outer struct's; `want:"a list of group names"` says what the value should
// be when it is of the wrong kind); a key no field names is refused with the known names, a
// key given twice is refused, and a value of the wrong kind is refused with what was
// wanted. A field of type yaml.Node or *yaml.Node keeps the node as it is; Pairs keeps a
// mapping's order, Strings takes one string or a list.
func (d *Doc) Decode(n *yaml.Node, path string, v any) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		panic("yamlconf: Decode needs a non-nil pointer")
	}
	d.decode(n, path, rv.Elem(), 0, "")
}

// want, when set, replaces the description of the type in "want X, got Y" (the `want:"..."`
// tag of the struct field being decoded).
func (d *Doc) decode(n *yaml.Node, path string, v reflect.Value, depth int, want string) {
	if n == nil {
		return
	}
	d.visited++
	if d.visited == DefaultMaxNodes+1 {
		d.ErrorAt(n, path, "the file expands to more than %d values (aliases counted each time they are used)", DefaultMaxNodes)
	}
	if d.visited > DefaultMaxNodes {
		return // a hostile file: one error is enough
	}
	if depth > DefaultMaxDepth {
		d.ErrorAt(n, path, "nested more than %d levels deep", DefaultMaxDepth)
		return
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			d.ErrorAt(n, path, "unknown alias")
			return
		}
		d.decode(n.Alias, path, v, depth+1, want)
		return
	}
	if _, seen := d.nodes[path]; !seen {
		d.nodes[path] = n
	}
	if v.Type() == nodeType {
		v.Set(reflect.ValueOf(*n))
		return
	}
	if v.Kind() == reflect.Pointer && v.Type().Elem() == nodeType {
		v.Set(reflect.ValueOf(n))
		return
	}
	if v.CanAddr() && v.Addr().Type().Implements(selfDecoderType) {
		v.Addr().Interface().(selfDecoder).decodeSelf(d, n, path, depth, want)
		return
	}
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		v.Addr().Interface().(Unmarshaler).UnmarshalYAMLConf(d, n, path)
		return
	}
	if v.Kind() == reflect.Pointer {
		if isNull(n) {
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, path, v.Elem(), depth, want)
		return
	}
	if isNull(n) && v.Kind() != reflect.Interface {
		return // null leaves the zero value, as yaml.v3 does
	}
	switch v.Kind() {
	case reflect.Struct:
		d.decodeStruct(n, path, v, depth, want)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.ErrorAt(n, path, "want %s, got %s", or(want, "a list"), Kind(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			d.decode(c, Index(path, i), s.Index(i), depth+1, "")
		}
		v.Set(s)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.ErrorAt(n, path, "want %s, got %s", or(want, "a mapping"), Kind(n))
			return
		}
		if v.Type().Key().Kind() != reflect.String {
			panic("yamlconf: map keys must be strings: " + v.Type().String())
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		d.entries(n, path, func(k, val *yaml.Node, p string) {
			e := reflect.New(v.Type().Elem()).Elem()
			d.decode(val, p, e, depth+1, "")
			v.SetMapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key()), e)
		})
	case reflect.Interface:
		budget := DefaultMaxNodes - d.visited
		a, ok := jsonValue(n, depth, &budget)
		if !ok {
			d.ErrorAt(n, path, "the value expands to more than %d values or %d levels (aliases counted each time they are used)", DefaultMaxNodes, DefaultMaxDepth)
			d.visited = DefaultMaxNodes + 1 // a hostile file: stop decoding
			return
		}
		d.visited = DefaultMaxNodes - budget
		if a != nil {
			v.Set(reflect.ValueOf(a))
		}
	default:
		d.decodeScalar(n, path, v, want)
	}
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// field is one struct field a mapping key may name.
type field struct {
	name  string
	want  string // the `want:"..."` tag: what the value should be, in words
	index []int
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// fieldsOf lists the fields of struct t; the fields of an embedded struct tagged
// `yaml:",inline"` are read as the outer struct's own.
func fieldsOf(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if f.Anonymous && opts == "inline" && f.Type.Kind() == reflect.Struct {
			for _, in := range fieldsOf(f.Type) {
				in.index = append([]int{i}, in.index...)
				out = append(out, in)
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if tag == "-" {
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name[:1]) + f.Name[1:]
		}
		out = append(out, field{tag, f.Tag.Get("want"), f.Index})
	}
	return out
}

func (d *Doc) decodeStruct(n *yaml.Node, path string, v reflect.Value, depth int, want string) {
	fields := fieldsOf(v.Type())
	if n.Kind != yaml.MappingNode {
		d.ErrorAt(n, path, "want %s, got %s", or(want, "a mapping"), Kind(n))
		return
	}
	d.entries(n, path, func(k, val *yaml.Node, p string) {
		f, ok := lookup(fields, k.Value)
		switch {
		case !ok && d.unknown != nil:
			d.ErrorAt(k, p, "%s", d.unknown(k.Value, names(fields)))
		case !ok:
			d.ErrorAt(k, p, "unknown field%s; known fields: %s", hint(fields, k.Value), strings.Join(names(fields), ", "))
		default:
			d.decode(val, p, v.FieldByIndex(f.index), depth+1, f.want)
		}
	})
}

// entries calls fn with each key of mapping n that is a name given once, its value and its
// path, reporting the other keys.
func (d *Doc) entries(n *yaml.Node, path string, fn func(k, val *yaml.Node, p string)) {
	first := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		p := Join(path, k.Value)
		if k.Kind != yaml.ScalarNode {
			d.ErrorAt(k, path, "want a name as key, got %s", Kind(k))
			continue
		}
		if prev := first[k.Value]; prev != nil {
			d.ErrorAt(k, p, "set twice (first at line %d)", prev.Line)
			continue
		}
		first[k.Value] = k
		d.keys[p] = k
		fn(k, val, p)
	}
}

func lookup(fields []field, name string) (field, bool) {
	for _, f := range fields {
		if f.name == name {
			return f, true
		}
	}
	return field{}, false
}

func names(fields []field) []string {
	s := make([]string, len(fields))
	for i, f := range fields {
		s[i] = f.name
	}
	return s
}

// hint suggests the field a key is likely a typo of: the closest name, ignoring case, within
// 2 edits (3 for keys of 9 bytes or more), as package spelling does for the other loaders
// (which this base package cannot import).
func hint(fields []field, key string) string {
	best, bestD := "", 1<<30
	for _, f := range fields {
		if d := levenshtein.ComputeDistance(strings.ToLower(key), strings.ToLower(f.name)); d < bestD {
			best, bestD = f.name, d
		}
	}
	limit := 2
	if len(key) >= 9 {
		limit = 3
	}
	if bestD > limit {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func (d *Doc) decodeScalar(n *yaml.Node, path string, v reflect.Value, tagWant string) {
	want := map[reflect.Kind]string{
		reflect.String: "a string", reflect.Bool: "true or false",
		reflect.Float32: "a number", reflect.Float64: "a number",
	}[v.Kind()]
	if want == "" {
		want = "a whole number"
	}
	if v.Type() == durationType {
		want = "a duration such as 30s or 5m"
	}
	want = or(tagWant, want)
	if n.Kind != yaml.ScalarNode {
		d.ErrorAt(n, path, "want %s, got %s", want, Kind(n))
		return
	}
	bad := func() { d.ErrorAt(n, path, "want %s, got %s", want, Kind(n)) }
	switch v.Kind() {
	case reflect.String:
		v.SetString(n.Value) // numbers and booleans are taken as their text
	case reflect.Bool:
		var b bool
		if n.Decode(&b) != nil {
			bad()
			return
		}
		v.SetBool(b)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil || n.Tag == "!!bool" || math.IsNaN(f) {
			bad()
			return
		}
		v.SetFloat(f)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.Type() == durationType {
			dur, err := time.ParseDuration(n.Value)
			if err != nil {
				bad()
				return
			}
			v.SetInt(int64(dur))
			return
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil || v.OverflowInt(i) {
			bad()
			return
		}
		v.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u, err := strconv.ParseUint(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err != nil || v.OverflowUint(u) {
			bad()
			return
		}
		v.SetUint(u)
	default:
		panic("yamlconf: cannot decode into " + v.Type().String())
	}
}

// Kind names what a node is, for "want X, got Y": a scalar is quoted so that the reader
// sees the value the file holds.
func Kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return strconv.Quote(n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

// SyntaxError reports a YAML parse error of src at the line of the mistake, its message once
// prefixed ("YAML: did not find expected key"). yaml.v3 puts in its message the line where
// the enclosing block or flow began, often lines above the mistake; the mistake's line is
// the first one at which the file's beginning fails to parse with the same message, found
// by bisection (about log2(lines) parses of parts of the file). Past maxBisect bytes the
// bisection would cost too much for one error message: yaml's line stays.
func SyntaxError(file string, src []byte, err error) *Error {
	msg, line := splitYAMLError(err.Error())
	if len(src) > MaxBisect {
		return &Error{File: file, Line: line, Msg: "YAML: " + msg}
	}
	lines := bytes.SplitAfter(src, []byte("\n"))
	if n := len(lines); n > 0 && len(lines[n-1]) == 0 {
		lines = lines[:n-1]
	}
	fails := func(n int) bool { // the first n lines fail to parse with msg
		var doc yaml.Node
		e := yaml.NewDecoder(bytes.NewReader(bytes.Join(lines[:n], nil))).Decode(&doc)
		if e == nil {
			return false
		}
		m, _ := splitYAMLError(e.Error())
		return m == msg
	}
	if lo, hi := 0, len(lines); hi > 0 && fails(hi) {
		for hi-lo > 1 { // prefix lo parses (or fails otherwise), prefix hi fails with msg
			mid := (lo + hi) / 2
			if fails(mid) {
				hi = mid
			} else {
				lo = mid
			}
		}
		line = hi
	}
	return &Error{File: file, Line: line, Msg: "YAML: " + msg}
}

// MaxBisect bounds the files SyntaxError bisects (configuration files are far smaller).
const MaxBisect = 256 << 10

var yamlLineRE = regexp.MustCompile(`^line (\d+):(.*)`)

// splitYAMLError splits "yaml: line 3: did not find expected key" into the message and line.
func splitYAMLError(s string) (string, int) {
	s = strings.TrimPrefix(s, "yaml: ")
	line := 0
	if m := yamlLineRE.FindStringSubmatch(s); m != nil {
		line, _ = strconv.Atoi(m[1])
		s = strings.TrimPrefix(m[2], " ")
	}
	return s, line
}
