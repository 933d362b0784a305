package fileedit

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// segment is one step of a key path: a map key or a list index.
type segment struct {
	key     string
	index   int
	isIndex bool
	// quoted is set for a key written in quotes ("a.b" or ["a.b"]): it names one key even
	// when it holds dots, so the dotted-literal check leaves it alone.
	quoted bool
}

// keyPath is a parsed key such as `spec.containers[0].image`.
type keyPath []segment

// maxIndex bounds list indexes so that a typo cannot ask for a huge list.
const maxIndex = 1 << 20

// parsePath parses the key syntax documented on [Change].
func parsePath(s string) (keyPath, error) {
	if s == "" {
		return nil, keyErr(s, ErrInvalidKey, "key is empty")
	}
	if !utf8.ValidString(s) {
		return nil, keyErr(s, ErrInvalidKey, "key is not valid UTF-8")
	}
	var p keyPath
	i := 0
	expectKey := true // at the start or after a '.'
	for i < len(s) {
		switch c := s[i]; {
		case c == '[':
			if expectKey && i > 0 {
				return nil, keyErr(s, ErrInvalidKey, fmt.Sprintf("'[' right after '.' at offset %d", i))
			}
			if i+1 < len(s) && s[i+1] == '"' {
				// ["a.b"]: a quoted map key in brackets, as in JavaScript and yq.
				j := closingQuote(s, i+1)
				if j < 0 {
					return nil, keyErr(s, ErrInvalidKey, fmt.Sprintf("unterminated quoted key at offset %d", i+1))
				}
				if j+1 >= len(s) || s[j+1] != ']' {
					return nil, keyErr(s, ErrInvalidKey, fmt.Sprintf("want ']' after the quoted key at offset %d", j+1))
				}
				k, err := strconv.Unquote(s[i+1 : j+1])
				if err != nil || !utf8.ValidString(k) {
					return nil, keyErr(s, ErrInvalidKey, fmt.Sprintf("bad quoted key segment %s at offset %d", s[i+1:j+1], i+1))
				}
				p = append(p, segment{key: k, quoted: true})
				i = j + 2
				expectKey = false
				continue
			}
			j := strings.IndexByte(s[i:], ']')
			if j < 0 {
				return nil, keyErr(s, ErrInvalidKey, fmt.Sprintf("unclosed '[' at offset %d", i))
			}
			digits := s[i+1 : i+j]
			n, err := parseIndex(digits)
			if err != nil {
				return nil, keyErr(s, ErrInvalidKey, fmt.Sprintf("list index [%s] at offset %d: %v", digits, i, err))
			}
			p = append(p, segment{index: n, isIndex: true})
			i += j + 1
			expectKey = false
		case c == '.':
			if expectKey {
				return nil, keyErr(s, ErrInvalidKey, fmt.Sprintf("empty key segment at offset %d", i))
			}
			i++
			expectKey = true
			if i == len(s) {
				return nil, keyErr(s, ErrInvalidKey, "key ends with '.'")
			}
		case !expectKey:
			return nil, keyErr(s, ErrInvalidKey, fmt.Sprintf("want '.' or '[' at offset %d, found %q", i, c))
		case c == '"':
			j := closingQuote(s, i)
			if j < 0 {
				return nil, keyErr(s, ErrInvalidKey, fmt.Sprintf("unterminated quoted key at offset %d", i))
			}
			k, err := strconv.Unquote(s[i : j+1])
			if err != nil || !utf8.ValidString(k) {
				return nil, keyErr(s, ErrInvalidKey, fmt.Sprintf("bad quoted key segment %s at offset %d", s[i:j+1], i))
			}
			p = append(p, segment{key: k, quoted: true})
			i = j + 1
			expectKey = false
		default:
			var b strings.Builder
			escaped := false
			for i < len(s) && s[i] != '.' && s[i] != '[' {
				switch s[i] {
				case ']', '"':
					return nil, keyErr(s, ErrInvalidKey, fmt.Sprintf("unexpected %q at offset %d (quote the key to use it)", s[i], i))
				case '\\':
					if i+1 == len(s) {
						return nil, keyErr(s, ErrInvalidKey, "key ends with a lone backslash")
					}
					i++
					escaped = true
				}
				b.WriteByte(s[i])
				i++
			}
			p = append(p, segment{key: b.String(), quoted: escaped})
			expectKey = false
		}
	}
	return p, nil
}

func parseIndex(digits string) (int, error) {
	if digits == "" {
		return 0, fmt.Errorf("empty index")
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			if c == '-' {
				return 0, fmt.Errorf("negative indexes are not supported")
			}
			return 0, fmt.Errorf("not a number")
		}
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n > maxIndex {
		return 0, fmt.Errorf("index too large (max %d)", maxIndex)
	}
	return n, nil
}

// closingQuote returns the index of the '"' that closes the quoted key
// starting at s[start], honouring backslash escapes, or -1.
func closingQuote(s string, start int) int {
	for i := start + 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}

// CheckKey reports whether key is a well-formed key path, for checks at load time; the
// error is a *KeyError.
func CheckKey(key string) error {
	_, err := parsePath(key)
	return err
}

// String formats the path in canonical key syntax; it is used in error messages.
func (p keyPath) String() string {
	var b strings.Builder
	for i, s := range p {
		if s.isIndex {
			fmt.Fprintf(&b, "[%d]", s.index)
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		if s.quoted || s.key == "" || strings.ContainsAny(s.key, `.[]"\`) {
			b.WriteString(strconv.Quote(s.key))
		} else {
			b.WriteString(s.key)
		}
	}
	return b.String()
}

// bracketed formats the path like String but writes a key that needs quotes as ["..."],
// the form suggested in messages.
func (p keyPath) bracketed() string {
	var b strings.Builder
	for i, s := range p {
		switch {
		case s.isIndex:
			fmt.Fprintf(&b, "[%d]", s.index)
		case s.key == "" || strings.ContainsAny(s.key, `.[]"\`):
			b.WriteString("[" + strconv.Quote(s.key) + "]")
		default:
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.key)
		}
	}
	return b.String()
}

// Sibling returns path at (as in a [Creation]) with its last key replaced by key, in the
// form to type: `image.tga` and "tag" give `image.tag`. It is for did-you-mean hints.
func Sibling(at, key string) string {
	p, err := parsePath(at)
	if err != nil || len(p) == 0 {
		return strconv.Quote(key)
	}
	p[len(p)-1] = segment{key: key}
	return p.bracketed()
}

// describe renders a location for messages; the empty path is the root.
func (p keyPath) describe() string {
	if len(p) == 0 {
		return "the document root"
	}
	return p.String()
}

// child returns p extended by seg without sharing p's backing array.
func (p keyPath) child(seg segment) keyPath {
	out := make(keyPath, len(p), len(p)+1)
	copy(out, p)
	return append(out, seg)
}
