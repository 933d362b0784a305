package template

import (
	"fmt"
	"strings"
)

const (
	nativeOpen   = "${{"
	nativeClose  = "}}"
	harnessOpen  = "<+"
	harnessClose = ">"

	// maxNesting bounds delimiters nested inside delimiters (the scanner recurses).
	maxNesting = 32
)

type scanKind int

const (
	scanTop     scanKind = iota // a condition: runs to the end of the input
	scanNative                  // ${{ ... }}
	scanHarness                 // <+ ... >
)

// operand is a delimited expression inside a larger expression (conditions
// and nested delimiters); used to report errors against it.
type operand struct{ start, end int }

// exprSpan is one top-level delimited expression of a template.
type exprSpan struct {
	start, end int    // src[start:end] includes the delimiters
	bodyStart  int    // offset of the body in src
	body       string // body with nested delimiters turned into parentheses; same length as the source body
}

type segment struct {
	text string
	expr *exprSpan
}

// nextOpener returns the offset of the first opening delimiter at or after i.
func nextOpener(src string, i int) (int, string) {
	n := strings.Index(src[i:], nativeOpen)
	h := strings.Index(src[i:], harnessOpen)
	switch {
	case n < 0 && h < 0:
		return -1, ""
	case h < 0 || (n >= 0 && n < h):
		return i + n, nativeOpen
	default:
		return i + h, harnessOpen
	}
}

// backslashesBefore counts the backslashes immediately before j, not looking before i.
func backslashesBefore(src string, i, j int) int {
	k := 0
	for j-k-1 >= i && src[j-k-1] == '\\' {
		k++
	}
	return k
}

// splitTemplate cuts src into text and expression segments, applying the
// backslash escapes before delimiters.
func splitTemplate(src string) ([]segment, error) {
	var segs []segment
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			segs = append(segs, segment{text: text.String()})
			text.Reset()
		}
	}
	for i := 0; i < len(src); {
		j, open := nextOpener(src, i)
		if j < 0 {
			text.WriteString(src[i:])
			break
		}
		k := backslashesBefore(src, i, j)
		text.WriteString(src[i : j-k])
		text.WriteString(strings.Repeat(`\`, k/2))
		if k%2 == 1 {
			text.WriteString(open)
			i = j + len(open)
			continue
		}
		flush()
		kind := scanNative
		if open == harnessOpen {
			kind = scanHarness
		}
		sc := &scanner{src: src}
		bodyStart := j + len(open)
		out := make([]byte, 0, 32)
		end, err := sc.body(bodyStart, kind, &out, 0)
		if err != nil {
			return nil, sc.toError(j, err)
		}
		if strings.TrimSpace(string(out)) == "" {
			return nil, &Error{Offset: j, Pos: j, Expr: src[j:end], Err: fmt.Errorf("%w: empty expression", ErrSyntax)}
		}
		segs = append(segs, segment{expr: &exprSpan{start: j, end: end, bodyStart: bodyStart, body: string(out)}})
		i = end
	}
	flush()
	return segs, nil
}

// translateCondition turns a whole condition into one expr source of the same
// length, with every delimited operand turned into a parenthesised expression.
func translateCondition(src string) (string, []operand, error) {
	sc := &scanner{src: src}
	out := make([]byte, 0, len(src))
	if _, err := sc.body(0, scanTop, &out, 0); err != nil {
		return "", nil, sc.toError(0, err)
	}
	return string(out), sc.operands, nil
}

type scanner struct {
	src      string
	operands []operand
}

// scanError is a scanner failure at byte offset pos; open is the offset of
// the delimiter being scanned when known (-1 otherwise).
type scanError struct {
	pos, open int
	err       error
}

func (e *scanError) Error() string { return e.err.Error() }

func (s *scanner) toError(start int, err error) error {
	se, ok := err.(*scanError)
	if !ok {
		return &Error{Offset: start, Pos: start, Expr: s.src[start:], Err: err}
	}
	open := start
	if se.open >= 0 {
		open = se.open
	}
	end := len(s.src)
	for _, o := range s.operands {
		if o.start == open {
			end = o.end
		}
	}
	return &Error{Offset: open, Pos: se.pos, Expr: s.src[open:end], Err: se.err}
}

// body scans an expression body starting at pos until the closer of kind
// (the end of input for scanTop), appending the translated bytes to out. It
// returns the offset just past the closer.
func (s *scanner) body(pos int, kind scanKind, out *[]byte, depth int) (int, error) {
	src := s.src
	brackets := 0
	for i := pos; i < len(src); {
		c := src[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j, err := s.quoted(i)
			if err != nil {
				return 0, err
			}
			*out = append(*out, src[i:j]...)
			i = j
		case strings.HasPrefix(src[i:], nativeOpen) || strings.HasPrefix(src[i:], harnessOpen):
			if depth >= maxNesting {
				return 0, &scanError{pos: i, open: -1, err: fmt.Errorf("%w: delimiters nested more than %d deep", ErrSyntax, maxNesting)}
			}
			native := strings.HasPrefix(src[i:], nativeOpen)
			open, nested, openRepl, closeRepl := harnessOpen, scanHarness, " (", ")"
			if native {
				open, nested, openRepl, closeRepl = nativeOpen, scanNative, "  (", ") "
			}
			*out = append(*out, openRepl...)
			start := len(*out)
			j, err := s.body(i+len(open), nested, out, depth+1)
			if err != nil {
				if se, ok := err.(*scanError); ok && se.open < 0 {
					se.open = i
				}
				return 0, err
			}
			inner := (*out)[start:]
			if strings.TrimSpace(string(inner)) == "" {
				return 0, &scanError{pos: i, open: i, err: fmt.Errorf("%w: empty expression", ErrSyntax)}
			}
			*out = append(*out, closeRepl...)
			s.operands = append(s.operands, operand{start: i, end: j})
			i = j
		case kind == scanNative && brackets == 0 && strings.HasPrefix(src[i:], nativeClose):
			return s.checkInput(pos, i, kind, i+len(nativeClose))
		case kind == scanHarness && brackets == 0 && c == '>':
			return s.checkInput(pos, i, kind, i+len(harnessClose))
		case c == '(' || c == '[' || c == '{':
			brackets++
			*out = append(*out, c)
			i++
		case c == ')' || c == ']' || c == '}':
			if brackets > 0 {
				brackets--
			}
			*out = append(*out, c)
			i++
		default:
			*out = append(*out, c)
			i++
		}
	}
	switch kind {
	case scanNative:
		return 0, &scanError{pos: len(src), open: -1, err: fmt.Errorf("%w: missing closing %s", ErrSyntax, nativeClose)}
	case scanHarness:
		return 0, &scanError{pos: len(src), open: -1, err: fmt.Errorf("%w: missing closing %s", ErrSyntax, harnessClose)}
	}
	return len(src), nil
}

// checkInput rejects Harness's runtime input marker <+input>.
func (s *scanner) checkInput(bodyStart, closeAt int, kind scanKind, next int) (int, error) {
	if kind == scanHarness && strings.TrimSpace(s.src[bodyStart:closeAt]) == "input" {
		return 0, &scanError{pos: bodyStart, open: bodyStart - len(harnessOpen), err: ErrRuntimeInput}
	}
	return next, nil
}

// quoted returns the offset just past the string literal starting at i.
func (s *scanner) quoted(i int) (int, error) {
	src := s.src
	q := src[i]
	for j := i + 1; j < len(src); j++ {
		switch {
		case q != '`' && src[j] == '\\':
			j++
		case src[j] == q:
			return j + 1, nil
		case strings.HasPrefix(src[j:], nativeOpen) || strings.HasPrefix(src[j:], harnessOpen):
			return 0, &scanError{pos: j, open: -1, err: fmt.Errorf("%w: expression delimiter inside a quoted string is never evaluated; move it out of the quotes (write <+a> == \"x\", not \"<+a>\" == \"x\")", ErrSyntax)}
		}
	}
	return 0, &scanError{pos: i, open: -1, err: fmt.Errorf("%w: unterminated string literal", ErrSyntax)}
}
