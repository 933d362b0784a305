// Package fileedit is the file-editing engine of the UpdateReleaseRepo step.
//
// It sets values at key paths in the JSON and YAML files of a GitOps release
// repository and changes nothing else: comments, key order, indentation,
// quoting, blank lines, line endings and the final newline (or its absence)
// stay byte for byte. Harness re-serialises the whole file instead, which is
// the most visible complaint about its step; this package parses the file only
// to locate the bytes of the target value and splices new bytes in their place.
//
// Every edit is checked before it is returned: the result is parsed again and
// must equal the original document with exactly the requested values set. An
// edit that would produce anything else is refused with an error instead of
// being written.
//
// # Key paths
//
// A key is a dotted path with list indexes: "image.tag",
// "spec.containers[0].image", "a.b[2]", "[0].name" (the document root is a
// list). A segment that contains '.', '[', ']' or '"' is written in double
// quotes with Go/JSON escapes, after a dot or in brackets:
// `annotations."app.kubernetes.io/name"` or `annotations["app.kubernetes.io/name"]`.
// An unquoted path that would walk through such a key dot by dot is refused
// ([ErrDottedKey]) with the quoted form to use: it would otherwise create
// nested maps next to the key it meant. For
// compatibility with Kargo's yaml-update, a backslash in an unquoted segment
// escapes the next character: `annotations.app\.kubernetes\.io/name`.
//
// # Semantics
//
//   - A missing map key is created, together with any missing maps on the way;
//     a null value on the way is replaced by the map or list being created.
//   - List index == length appends an item; a larger index is an error
//     ([ErrIndexOutOfRange]).
//   - Scalars may change type (string to number and so on). A map can only be
//     set to a map and a list only to a list (a [TypeMismatchError] otherwise),
//     as Harness does, so that a mistyped key cannot wipe a whole subtree. A map
//     value replaces the map: unchanged entries keep their bytes, missing ones
//     are appended; if the map has keys the value lacks, the map is rewritten.
//   - Setting a value that is already present changes nothing (changed=false):
//     a redelivered job sees that there is nothing to do.
//   - YAML aliases are never edited through: a path that crosses an alias, or a
//     key inherited through a merge key (<<) that must be descended into, is an
//     [ErrAlias] error. Editing an anchored value itself is allowed and, as YAML
//     defines, every alias of it follows.
//   - Multi-document YAML: [Options.Document] selects the document by index or
//     by kind and metadata.name; the other documents are not touched. A file
//     with several non-empty documents and no selector is an
//     [ErrAmbiguousDocument] error that lists them, never a silent pick.
//
// # Layout of new text
//
// A replaced scalar keeps its quoting when the value allows: double-quoted
// stays double-quoted (escaped), single-quoted stays single-quoted, plain
// stays plain unless the string would read back as something else (true,
// yes, 1.0, 0x1F, null, dates, "", "a: b", leading indicators...), in which
// case it gets the file's usual quote. Numbers, booleans and null are plain.
// Block scalars are rewritten in place with their indentation; a new
// multi-line string becomes a literal block. New keys go after the last
// entry of their map (after comment lines indented deeper than the entries,
// before anything else), with the indentation, list style, line breaks and
// key quoting found in the file; list items appended to a list follow the
// quoting of the last item. New maps from map values are written with keys
// in sorted order. JSON gets the file's indentation unit, separators and
// one-line or multi-line layout of the neighbouring values.
package fileedit

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Format is the syntax of a release-repo file.
type Format int

// Supported formats.
const (
	JSON Format = iota + 1
	YAML
)

func (f Format) String() string {
	switch f {
	case JSON:
		return "JSON"
	case YAML:
		return "YAML"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// FormatFor picks the format from the file extension (.json, .yaml, .yml; case
// does not matter). Unlike Harness, which treats every non-.json file as YAML,
// any other extension is an error so that a mistyped path template is noticed.
func FormatFor(path string) (Format, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".json":
		return JSON, nil
	case ".yaml", ".yml":
		return YAML, nil
	case "":
		return 0, fmt.Errorf("%w: %q has no extension; want .json, .yaml or .yml", ErrUnsupportedFormat, path)
	default:
		return 0, fmt.Errorf("%w: %q has extension %q; want .json, .yaml or .yml", ErrUnsupportedFormat, path, ext)
	}
}

// Change sets one value.
type Change struct {
	// Key is a key path; see the package documentation for the syntax.
	Key string
	// Value is nil, a string, a bool, any Go integer or float type,
	// json.Number, or a slice or string-keyed map of those (as decoded from
	// JSON or YAML). Floats without a fractional part are written as integers
	// (Harness writes "3.0" as 3). Strings must be valid UTF-8.
	Value any
}

// Options tune Apply and Create.
type Options struct {
	// IgnoreMissingValues skips a change whose value is nil or a string that is
	// empty or only white space, as Harness's ignoreMissingValues does ("skip a
	// variable update when its resolved value is null or empty"). Without it,
	// nil is written as null and "" as an empty string.
	IgnoreMissingValues bool
	// Document selects the YAML document to edit in a multi-document file.
	// Without it, a file with more than one non-empty document is refused
	// ([ErrAmbiguousDocument]) rather than having its first document edited.
	// A JSON file is one document: an index must be 0, a kind or name must
	// match its top level.
	Document Document
	// Created, when set, is called before a change adds a key or list item the file does not
	// have (a missing map key, index == length, a null on the way); an error refuses the
	// change and is returned by Apply. Create does not call it: a new file is all new.
	Created func(Creation) error
}

// Errors to branch on with errors.Is. Key-related errors come wrapped in a
// *KeyError that names the key.
var (
	ErrUnsupportedFormat = errors.New("unsupported file format")
	ErrInvalidKey        = errors.New("invalid key path")
	ErrIndexOutOfRange   = errors.New("list index out of range")
	ErrAlias             = errors.New("YAML alias in the way")
	ErrUnsupportedValue  = errors.New("unsupported value")
	ErrNoDocument        = errors.New("YAML document not found")
	ErrSecretValue       = errors.New("secret values cannot be written to a release file")
	ErrBadValue          = errors.New("value does not match its type")
	// ErrDottedKey: an unquoted path walks, dot by dot, through a key the file holds with
	// the dots in it (metadata.annotations.argocd.argoproj.io/sync-wave).
	ErrDottedKey = errors.New("dotted key needs quotes")
)

// Creation is a change that adds a map key or list item the file does not have.
type Creation struct {
	Key string // the change's key as given
	// At is the key path up to and including the first missing part (image.tga).
	At string
	// Missing is that part: the map key, or "" for a list item (Item). Siblings are the
	// keys of the map it would be added to (none for a list item or a null on the way).
	Missing  string
	Item     bool
	Siblings []string
}

// errEditCheck marks an edit that failed its own verification; it means a bug
// in this package, and the file is left untouched.
var errEditCheck = errors.New("internal error: edit verification failed")

// KeyError reports a problem with one change: a bad key path, an index out of
// range, an alias on the path, or a value that cannot be written.
type KeyError struct {
	Key    string // the key as given in the Change
	Err    error  // one of the Err* sentinels
	Detail string
}

func (e *KeyError) Error() string { return fmt.Sprintf("key %q: %s", e.Key, e.Detail) }
func (e *KeyError) Unwrap() error { return e.Err }

func keyErr(key string, kind error, detail string) *KeyError {
	return &KeyError{Key: key, Err: kind, Detail: detail}
}

// TypeMismatchError reports that the file holds a different kind of value at
// (a prefix of) the key than the change needs: descending into a string as if
// it were a map, indexing a map as a list, or setting a map to a scalar.
type TypeMismatchError struct {
	Key  string // the key as given in the Change
	At   string // the part of the key where the mismatch is
	Have string // what the file holds: map, list, string, number, boolean, null, ...
	Want string // what the change needs there
}

func (e *TypeMismatchError) Error() string {
	return fmt.Sprintf("key %q: %s is a %s in the file, not a %s", e.Key, e.At, e.Have, e.Want)
}

// SyntaxError reports input that does not parse. Line and Column are 1-based;
// Column is 0 when the parser does not report it (yaml.v3 reports only lines).
// The caller adds the file name.
type SyntaxError struct {
	Format Format
	Line   int
	Column int
	Msg    string
}

func (e *SyntaxError) Error() string {
	switch {
	case e.Line > 0 && e.Column > 0:
		return fmt.Sprintf("%s syntax error at line %d, column %d: %s", e.Format, e.Line, e.Column, e.Msg)
	case e.Line > 0:
		return fmt.Sprintf("%s syntax error at line %d: %s", e.Format, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s syntax error: %s", e.Format, e.Msg)
}

// prepared is a validated change.
type prepared struct {
	key     string
	path    keyPath
	value   any // canonical, see canonical()
	created func(Creation) error
}

func prepare(changes []Change, opts Options) ([]prepared, error) {
	out := make([]prepared, 0, len(changes))
	for _, c := range changes {
		if opts.IgnoreMissingValues && IsMissing(c.Value) {
			continue
		}
		p, err := parsePath(c.Key)
		if err != nil {
			return nil, err
		}
		v, err := canonical(c.Value)
		if err != nil {
			return nil, keyErr(c.Key, ErrUnsupportedValue, err.Error())
		}
		out = append(out, prepared{key: c.Key, path: p, value: v, created: opts.Created})
	}
	return out, nil
}

// IsMissing reports whether a value is what IgnoreMissingValues skips: nil, or a string that
// is empty or only white space.
func IsMissing(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return strings.TrimSpace(v) == ""
	}
	return false
}

// Apply sets the changes, in order, in src and returns the new content.
// changed is false when every value was already present; out is then src.
// Errors: *SyntaxError for unparsable input, *KeyError and
// *TypeMismatchError for changes that do not fit the file.
func Apply(f Format, src []byte, changes []Change, opts Options) (out []byte, changed bool, err error) {
	cs, err := prepare(changes, opts)
	if err != nil {
		return nil, false, err
	}
	switch f {
	case YAML:
		out, err = applyYAML(src, cs, opts.Document)
	case JSON:
		if err = checkJSONDocument(src, opts.Document); err == nil {
			out, err = applyJSON(src, cs)
		}
	default:
		return nil, false, fmt.Errorf("%w: %v", ErrUnsupportedFormat, f)
	}
	if err != nil {
		return nil, false, err
	}
	if bytes.Equal(out, src) {
		return src, false, nil
	}
	return out, true, nil
}

// Create returns the content of a new file holding the changes, for a target
// file that does not exist yet (that is how a new environment appears). Keys
// appear in the order of the changes; indentation is two spaces. With no
// changes left the file is an empty map.
func Create(f Format, changes []Change, opts Options) ([]byte, error) {
	var seed []byte
	switch f {
	case YAML:
	case JSON:
		seed = []byte("{}\n")
	default:
		return nil, fmt.Errorf("%w: %v", ErrUnsupportedFormat, f)
	}
	if sel := opts.Document; sel.Kind != "" || sel.Name != "" || (sel.Index != nil && *sel.Index != 0) {
		return nil, fmt.Errorf("%w: the file does not exist yet, so no document has %s", ErrNoDocument, sel)
	}
	opts.Document, opts.Created = Document{}, nil
	out, _, err := Apply(f, seed, changes, opts)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		out = []byte("{}\n")
	}
	return out, nil
}
