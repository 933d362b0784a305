package fileedit

import "fmt"

// The JSON and YAML editors find the target of a change the same way: follow
// the key path, stop at a null or at a missing key or index to write what is
// not there yet, and at the end set the value, descending into maps and lists
// so that unchanged entries keep their bytes. That walk, and the loop that
// applies and checks one change after the other, are written once here; each
// format supplies a docTree that reads its parse tree and turns the walk's
// decisions into byte splices.

// nodeShape is what the walk needs to know about a node.
type nodeShape int

const (
	shapeScalar nodeShape = iota // a string, number, boolean or other scalar
	shapeNull
	shapeMap
	shapeList
)

// docTree is one format's parsed document as the walk sees it. S is the
// format's slot: a node together with what its surroundings say about how it
// may be rewritten.
type docTree[S any] interface {
	shape(s S) nodeShape
	// kindName names the node of s for messages: map, list, string, number...
	kindName(s S) string
	// location is where s is, for messages.
	location(s S) keyPath
	// holds reports whether the node of s already equals v.
	holds(s S, v any) (bool, error)
	// blocked refuses to edit through or at the node of s (a YAML alias);
	// at is the location to name.
	blocked(s S, at keyPath) error

	// items is the length of the list of s; item is the slot of item i.
	items(s S) int
	item(s S, i int) (S, error)
	// memberKeys lists the keys of the map of s in file order; ok is false
	// when the map cannot be edited entry by entry and is rewritten instead.
	memberKeys(s S) (keys []string, ok bool)
	// lookup returns the position of key among the members of s, or -1;
	// member is the slot of the value of the member at position i.
	lookup(s S, key string) int
	member(s S, i int) (S, error)
	// inherited handles key p[i], missing from the map of s, that the map
	// may still have by other means (a YAML merge key); done ends the walk.
	inherited(s S, p keyPath, i int) (done bool, err error)

	// replace writes v in place of the node of s; insertMembers and
	// appendItems add entries after the last one of the map or list of s.
	replace(s S, v any) error
	insertMembers(s S, kvs []kv) error
	appendItems(s S, items []any) error
}

// kv is a new map member.
type kv struct {
	key   string
	value any
}

// setPath applies change c below root.
func setPath[S any](t docTree[S], c prepared, root S) error {
	p, s := c.path, root
	for i, seg := range p {
		if err := t.blocked(s, p[:i]); err != nil {
			return err
		}
		if t.shape(s) == shapeNull {
			if err := c.creates(p, i, nil); err != nil {
				return err
			}
			v, err := build(p[i:], p, i, c.key, c.value)
			if err != nil {
				return err
			}
			return t.replace(s, v)
		}
		if seg.isIndex {
			if t.shape(s) != shapeList {
				return c.mismatch(p[:i], t.kindName(s), "list")
			}
			switch l := t.items(s); {
			case seg.index < l:
				var err error
				if s, err = t.item(s, seg.index); err != nil {
					return err
				}
				continue
			case seg.index == l:
				if err := c.creates(p, i, nil); err != nil {
					return err
				}
				v, err := build(p[i+1:], p, i+1, c.key, c.value)
				if err != nil {
					return err
				}
				return t.appendItems(s, []any{v})
			default:
				return outOfRange(c.key, p, i, seg.index, l)
			}
		}
		if t.shape(s) != shapeMap {
			return c.mismatch(p[:i], t.kindName(s), "map")
		}
		if i+1 < len(p) && !seg.quoted && !p[i+1].isIndex && !p[i+1].quoted {
			// Only a path with an unquoted key after this one can be a dotted key split up.
			keys, _ := t.memberKeys(s)
			if err := dottedLiteral(c.key, p, i, keys); err != nil {
				return err
			}
		}
		mi := t.lookup(s, seg.key)
		if mi < 0 {
			if done, err := t.inherited(s, p, i); done || err != nil {
				return err
			}
			if c.created != nil {
				keys, _ := t.memberKeys(s)
				if err := c.creates(p, i, keys); err != nil {
					return err
				}
			}
			v, err := build(p[i+1:], p, i+1, c.key, c.value)
			if err != nil {
				return err
			}
			return t.insertMembers(s, []kv{{seg.key, v}})
		}
		var err error
		if s, err = t.member(s, mi); err != nil {
			return err
		}
	}
	return setValue(t, c, s, c.value)
}

// dottedLiteral refuses an unquoted path whose segments from i on, joined with dots, name a
// key that the map at p[:i] holds literally (Kubernetes annotations and labels such as
// argocd.argoproj.io/sync-wave): walking it dot by dot would create nested maps next to
// the real key and leave that key as it was.
func dottedLiteral(key string, p keyPath, i int, keys []string) error {
	if p[i].quoted || p[i].isIndex || len(keys) == 0 {
		return nil
	}
	joined := p[i].key
	for j := i + 1; j < len(p) && !p[j].isIndex && !p[j].quoted; j++ {
		joined += "." + p[j].key
		for _, k := range keys {
			if k != joined {
				continue
			}
			fixed := append(append(keyPath{}, p[:i]...), segment{key: k, quoted: true})
			fixed = append(fixed, p[j+1:]...)
			return keyErr(key, ErrDottedKey, fmt.Sprintf("%q is one key of %s, not a path; quote it: %s",
				k, p[:i].describe(), fixed.bracketed()))
		}
	}
	return nil
}

// creates asks the change's Created hook whether the key may add p[i] (and what follows it),
// which the file lacks; siblings are the keys of the map it would go into.
func (c prepared) creates(p keyPath, i int, siblings []string) error {
	if c.created == nil {
		return nil
	}
	return c.created(Creation{Key: c.key, At: p[:i+1].String(), Missing: p[i].key, Item: p[i].isIndex, Siblings: siblings})
}

// setValue gives the node of s the value v, touching as few bytes as it can.
// A map can only become a map and a list a list (see the package doc).
func setValue[S any](t docTree[S], c prepared, s S, v any) error {
	if eq, err := t.holds(s, v); err != nil || eq {
		return err
	}
	at := t.location(s)
	if err := t.blocked(s, at); err != nil {
		return err
	}
	switch t.shape(s) {
	case shapeNull:
		return t.replace(s, v)
	case shapeMap:
		m, ok := v.(map[string]any)
		if !ok {
			return c.mismatch(at, "map", kindOf(v))
		}
		return setMap(t, c, s, m)
	case shapeList:
		l, ok := v.([]any)
		if !ok {
			return c.mismatch(at, "list", kindOf(v))
		}
		return setList(t, c, s, l)
	}
	if k := kindOf(v); k == "map" || k == "list" {
		return c.mismatch(at, t.kindName(s), k)
	}
	return t.replace(s, v)
}

// setMap sets the members of the map of s one by one and appends the missing
// ones; a map that would lose keys is rewritten.
func setMap[S any](t docTree[S], c prepared, s S, m map[string]any) error {
	keys, ok := t.memberKeys(s)
	if !ok {
		return t.replace(s, m)
	}
	have := make(map[string]bool, len(keys))
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			return t.replace(s, m) // the map loses keys: rewrite it
		}
		have[k] = true
	}
	for i, k := range keys {
		ms, err := t.member(s, i)
		if err != nil {
			return err
		}
		if err := setValue(t, c, ms, m[k]); err != nil {
			return err
		}
	}
	if add := missing(m, have); len(add) > 0 {
		return t.insertMembers(s, add)
	}
	return nil
}

// setList sets the items of the list of s one by one and appends the rest; a
// list that would get shorter is rewritten.
func setList[S any](t docTree[S], c prepared, s S, l []any) error {
	n := t.items(s)
	if len(l) < n {
		return t.replace(s, l)
	}
	for i := range n {
		is, err := t.item(s, i)
		if err != nil {
			return err
		}
		if err := setValue(t, c, is, l[i]); err != nil {
			return err
		}
	}
	if len(l) == n {
		return nil
	}
	return t.appendItems(s, l[n:])
}

// applyEach applies the changes to text one at a time. edit turns change c
// into splices of the current text; accept checks the new text against the
// logical change (an error wrapping errEditCheck if it differs) and makes it
// the current one. A change with nothing to do leaves the text as it is.
func applyEach(text []byte, cs []prepared, edit func(c prepared, text []byte) (*splices, error), accept func(c prepared, out []byte) error) ([]byte, error) {
	for _, c := range cs {
		ed, err := edit(c, text)
		if err != nil {
			return nil, err
		}
		if ed.empty() {
			continue
		}
		out, err := ed.apply(text)
		if err == nil {
			err = accept(c, out)
		}
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", c.key, err)
		}
		text = out
	}
	return text, nil
}

// sameResult checks an edit: got (decoded from the new text, with decodeErr)
// must equal want, the old document with the change made to it.
func sameResult(want, got any, decodeErr error) error {
	if decodeErr != nil {
		return fmt.Errorf("%w: result does not decode: %v", errEditCheck, decodeErr)
	}
	if !valuesEqual(want, got) {
		return fmt.Errorf("%w: result differs from the requested change", errEditCheck)
	}
	return nil
}

func (c prepared) mismatch(at keyPath, have, want string) error {
	return &TypeMismatchError{Key: c.key, At: at.describe(), Have: have, Want: want}
}

// valueErr reports a value that cannot be written in the file.
func (c prepared) valueErr(err error) error {
	return keyErr(c.key, ErrUnsupportedValue, err.Error())
}
