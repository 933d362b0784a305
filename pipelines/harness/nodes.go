package harness

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Small builders for the native YAML tree, so the output keeps a predictable key order.

func mapNode() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode} }

func seqNode(items ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.SequenceNode, Content: items}
}

func strNode(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func intNode(i int) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(i)}
}

func boolNode(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}

func put(m *yaml.Node, key string, v *yaml.Node) {
	if v == nil {
		return
	}
	m.Content = append(m.Content, strNode(key), v)
}

func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// clone deep-copies a Harness node (aliases resolved), applying fn to every string scalar.
// Copies count against the conversion's budget, so anchors and matrices cannot blow up.
func (c *conv) clone(n *yaml.Node, fn func(s string) string) *yaml.Node {
	n = deref(n)
	if n == nil || !c.spend(1) {
		return nil
	}
	cp := *n
	cp.Anchor = ""
	cp.Content = nil
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && fn != nil {
		cp.Value = fn(n.Value)
	}
	for _, ch := range n.Content {
		x := c.clone(ch, fn)
		if x == nil {
			x = strNode("")
		}
		cp.Content = append(cp.Content, x)
	}
	return &cp
}

// at gives a node built for the native tree the position of the Harness node it stands for
// (src), so that a native load error about it is reported at that Harness field.
func at(n, src *yaml.Node) *yaml.Node {
	if n != nil && src != nil {
		n.Line, n.Column = src.Line, src.Column
	}
	return n
}

// noPos clears the positions of a tree copied from another file (the map): they are not
// positions in the Harness file.
func noPos(n *yaml.Node) *yaml.Node {
	if n != nil {
		n.Line, n.Column = 0, 0
		for _, x := range n.Content {
			noPos(x)
		}
	}
	return n
}

func isScalar(n *yaml.Node) bool { return n != nil && n.Kind == yaml.ScalarNode && n.Tag != "!!null" }

func itemPath(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

var nonID = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// inputName makes a native input name (letters, digits, _ and -, ≤ 63) from parts.
func inputName(parts ...string) string {
	s := nonID.ReplaceAllString(strings.Join(parts, "_"), "_")
	s = strings.Trim(s, "_")
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		s = "in_" + s
	}
	if len(s) > 63 {
		s = s[:63]
	}
	return s
}

// nativeID turns a Harness identifier into a native id (they share most of the alphabet).
func nativeID(s string) string {
	s = nonID.ReplaceAllString(s, "_")
	if s != "" && !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		s = "s" + s
	}
	return s
}
