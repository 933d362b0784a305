package argocdtest

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Selector is a parsed Kubernetes label selector, the syntax Argo CD accepts
// in the selector query parameter: comma-separated requirements of the forms
// key, !key, key=v, key==v, key!=v, key in (a,b), key notin (a,b), key>n, key<n.
type Selector struct {
	reqs []requirement
}

type selectorOp int

const (
	opExists selectorOp = iota
	opNotExists
	opEquals
	opNotEquals
	opIn
	opNotIn
	opGreater
	opLess
)

type requirement struct {
	key    string
	op     selectorOp
	values []string
}

// SelectorError reports where a selector is malformed.
type SelectorError struct {
	Selector string
	Pos      int // byte offset of the offending token
	Msg      string
}

func (e *SelectorError) Error() string {
	return fmt.Sprintf("invalid label selector %q at position %d: %s", e.Selector, e.Pos, e.Msg)
}

// ParseSelector parses s. The empty selector matches everything.
func ParseSelector(s string) (Selector, error) {
	p := &selParser{src: s}
	p.lex()
	if p.err != nil {
		return Selector{}, p.err
	}
	var sel Selector
	if len(p.toks) == 0 {
		return sel, nil
	}
	for {
		r, err := p.requirement()
		if err != nil {
			return Selector{}, err
		}
		sel.reqs = append(sel.reqs, r)
		t := p.next()
		if t.kind == tkEOF {
			break
		}
		if t.kind != tkComma {
			return Selector{}, p.errAt(t, fmt.Sprintf("found %q, expected ','", t.text))
		}
	}
	sort.SliceStable(sel.reqs, func(i, j int) bool { return sel.reqs[i].key < sel.reqs[j].key })
	return sel, nil
}

// Empty reports whether the selector has no requirements.
func (s Selector) Empty() bool { return len(s.reqs) == 0 }

// Matches reports whether labels satisfy every requirement. As in
// Kubernetes, != and notin match objects that lack the key.
func (s Selector) Matches(labels map[string]string) bool {
	for _, r := range s.reqs {
		v, has := labels[r.key]
		switch r.op {
		case opExists:
			if !has {
				return false
			}
		case opNotExists:
			if has {
				return false
			}
		case opEquals, opIn:
			if !has || !contains(r.values, v) {
				return false
			}
		case opNotEquals, opNotIn:
			if has && contains(r.values, v) {
				return false
			}
		case opGreater, opLess:
			if !has {
				return false
			}
			lv, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return false
			}
			rv, _ := strconv.ParseInt(r.values[0], 10, 64)
			if (r.op == opGreater && lv <= rv) || (r.op == opLess && lv >= rv) {
				return false
			}
		}
	}
	return true
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

type tokKind int

const (
	tkEOF tokKind = iota
	tkIdent
	tkNot      // !
	tkEq       // =
	tkDoubleEq // ==
	tkNotEq    // !=
	tkIn
	tkNotIn
	tkOpen
	tkClose
	tkComma
	tkGt
	tkLt
)

// oneCharTokens are the tokens that are one character whatever follows.
var oneCharTokens = map[byte]tokKind{'(': tkOpen, ')': tkClose, ',': tkComma, '>': tkGt, '<': tkLt}

// eqTokens are the tokens of '!' and '=': alone, and followed by '='.
var eqTokens = map[byte][2]tokKind{'!': {tkNot, tkNotEq}, '=': {tkEq, tkDoubleEq}}

type token struct {
	kind tokKind
	text string
	pos  int
}

type selParser struct {
	src  string
	toks []token
	i    int
	err  error
}

func isSpecial(c byte) bool {
	switch c {
	case '!', '=', '(', ')', ',', '<', '>':
		return true
	}
	return false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (p *selParser) lex() {
	s := p.src
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case isSpace(c):
			i++
		case c == '!' || c == '=':
			n := 1
			if i+1 < len(s) && s[i+1] == '=' {
				n = 2
			}
			p.toks = append(p.toks, token{eqTokens[c][n-1], s[i : i+n], i})
			i += n
		case oneCharTokens[c] != tkEOF:
			p.toks = append(p.toks, token{oneCharTokens[c], s[i : i+1], i})
			i++
		default:
			j := i
			for j < len(s) && !isSpace(s[j]) && !isSpecial(s[j]) {
				j++
			}
			word := s[i:j]
			kind := tkIdent
			switch word {
			case "in":
				kind = tkIn
			case "notin":
				kind = tkNotIn
			}
			p.toks = append(p.toks, token{kind, word, i})
			i = j
		}
	}
}

func (p *selParser) next() token {
	if p.i >= len(p.toks) {
		return token{kind: tkEOF, text: "end of selector", pos: len(p.src)}
	}
	t := p.toks[p.i]
	p.i++
	return t
}

func (p *selParser) peek() token {
	if p.i >= len(p.toks) {
		return token{kind: tkEOF, text: "end of selector", pos: len(p.src)}
	}
	return p.toks[p.i]
}

func (p *selParser) errAt(t token, msg string) error {
	return &SelectorError{Selector: p.src, Pos: t.pos, Msg: msg}
}

func (p *selParser) requirement() (requirement, error) {
	t := p.next()
	negated := false
	if t.kind == tkNot {
		negated = true
		t = p.next()
	}
	if t.kind != tkIdent {
		return requirement{}, p.errAt(t, fmt.Sprintf("found %q, expected a label key", t.text))
	}
	if msg := validateLabelKey(t.text); msg != "" {
		return requirement{}, p.errAt(t, fmt.Sprintf("invalid label key %q: %s", t.text, msg))
	}
	key := t.text
	if negated {
		if nt := p.peek(); nt.kind != tkComma && nt.kind != tkEOF {
			return requirement{}, p.errAt(nt, fmt.Sprintf("found %q, expected ',' or end of selector after '!%s'", nt.text, key))
		}
		return requirement{key: key, op: opNotExists}, nil
	}
	op := p.peek()
	switch op.kind {
	case tkComma, tkEOF:
		return requirement{key: key, op: opExists}, nil
	case tkEq, tkDoubleEq, tkNotEq:
		p.next()
		val := ""
		if v := p.peek(); v.kind == tkIdent || v.kind == tkIn || v.kind == tkNotIn {
			p.next()
			val = v.text
			if msg := validateLabelValue(val); msg != "" {
				return requirement{}, p.errAt(v, fmt.Sprintf("invalid label value %q: %s", val, msg))
			}
		} else if v.kind != tkComma && v.kind != tkEOF {
			return requirement{}, p.errAt(v, fmt.Sprintf("found %q, expected a label value after %q", v.text, op.text))
		}
		o := opEquals
		if op.kind == tkNotEq {
			o = opNotEquals
		}
		return requirement{key: key, op: o, values: []string{val}}, nil
	case tkIn, tkNotIn:
		p.next()
		if o := p.next(); o.kind != tkOpen {
			return requirement{}, p.errAt(o, fmt.Sprintf("found %q, expected '(' after %q", o.text, op.text))
		}
		var vals []string
		expectValue := true
		for {
			v := p.next()
			switch {
			case v.kind == tkClose:
				if len(vals) == 0 && expectValue {
					return requirement{}, p.errAt(v, fmt.Sprintf("the value set of %q must not be empty", op.text))
				}
				if expectValue {
					vals = append(vals, "")
				}
				o := opIn
				if op.kind == tkNotIn {
					o = opNotIn
				}
				return requirement{key: key, op: o, values: vals}, nil
			case v.kind == tkComma:
				if expectValue {
					vals = append(vals, "")
				}
				expectValue = true
			case (v.kind == tkIdent || v.kind == tkIn || v.kind == tkNotIn) && expectValue:
				if msg := validateLabelValue(v.text); msg != "" {
					return requirement{}, p.errAt(v, fmt.Sprintf("invalid label value %q: %s", v.text, msg))
				}
				vals = append(vals, v.text)
				expectValue = false
			default:
				return requirement{}, p.errAt(v, fmt.Sprintf("found %q, expected a value, ',' or ')' in the value set of %q", v.text, op.text))
			}
		}
	case tkGt, tkLt:
		p.next()
		v := p.next()
		if v.kind != tkIdent {
			return requirement{}, p.errAt(v, fmt.Sprintf("found %q, expected an integer after %q", v.text, op.text))
		}
		if _, err := strconv.ParseInt(v.text, 10, 64); err != nil {
			return requirement{}, p.errAt(v, fmt.Sprintf("%q is not an integer, as %q requires", v.text, op.text))
		}
		o := opGreater
		if op.kind == tkLt {
			o = opLess
		}
		return requirement{key: key, op: o, values: []string{v.text}}, nil
	default:
		return requirement{}, p.errAt(op, fmt.Sprintf("found %q, expected an operator (=, ==, !=, in, notin, >, <), ',' or end of selector", op.text))
	}
}

var (
	labelNameRe    = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	dnsSubdomainRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// validateLabelKey applies Kubernetes' qualified-name rules; "" means valid.
func validateLabelKey(k string) string {
	name := k
	if i := strings.LastIndexByte(k, '/'); i >= 0 {
		prefix := k[:i]
		name = k[i+1:]
		if prefix == "" {
			return "prefix part must not be empty"
		}
		if len(prefix) > 253 || !dnsSubdomainRe.MatchString(prefix) {
			return "prefix part must be a lowercase DNS subdomain (at most 253 characters)"
		}
	}
	if name == "" {
		return "name part must not be empty"
	}
	if msg := validateLabelValue(name); msg != "" {
		return "name part " + msg
	}
	return ""
}

// validateLabelValue applies Kubernetes' label-value rules; "" means valid.
func validateLabelValue(v string) string {
	if v == "" {
		return ""
	}
	if len(v) > 63 {
		return "must be at most 63 characters"
	}
	if !labelNameRe.MatchString(v) {
		return "must consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric"
	}
	return ""
}
