package yamlconf

import (
	"reflect"

	"go.yaml.in/yaml/v3"
)

// selfDecoder is a type of this package that reads its own node, with the nesting depth and
// the field's `want` tag that the public Unmarshaler does not get.
type selfDecoder interface {
	decodeSelf(d *Doc, n *yaml.Node, path string, depth int, want string)
}

// Pair is one entry of a Pairs mapping.
type Pair[T any] struct {
	Key     string
	KeyNode *yaml.Node // where the key is written
	Value   T
}

// Pairs is a mapping whose order matters (declared inputs, variables): its entries in file
// order, each value decoded as T at path.key. A key given twice is refused, as in a struct.
type Pairs[T any] []Pair[T]

func (ps *Pairs[T]) decodeSelf(d *Doc, n *yaml.Node, path string, depth int, want string) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.ErrorAt(n, path, "want %s, got %s", or(want, "a mapping"), Kind(n))
		return
	}
	out := make(Pairs[T], 0, len(n.Content)/2)
	d.entries(n, path, func(k, val *yaml.Node, p string) {
		out = append(out, Pair[T]{Key: k.Value, KeyNode: k})
		d.decode(val, p, reflect.ValueOf(&out[len(out)-1].Value).Elem(), depth+1, "")
	})
	*ps = out
}

// Strings is one string or a list of them (`branches: main` or `branches: [main, release]`).
// Null is refused, as is a null or a mapping among the items: a key given with no value is
// more likely a slip than a wish for no items.
type Strings []string

func (s *Strings) decodeSelf(d *Doc, n *yaml.Node, path string, depth int, want string) {
	switch {
	case n.Kind == yaml.ScalarNode && !isNull(n):
		*s = Strings{n.Value}
	case n.Kind == yaml.SequenceNode:
		out := make(Strings, 0, len(n.Content))
		for i, c := range n.Content {
			var item string
			if isNull(c) {
				d.ErrorAt(c, Index(path, i), "want a string, got null")
			}
			d.decode(c, Index(path, i), reflect.ValueOf(&item).Elem(), depth+1, "")
			out = append(out, item)
		}
		*s = out
	default:
		d.ErrorAt(n, path, "want %s, got %s", or(want, "a string or a list of strings"), Kind(n))
	}
}
