package fileedit

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite the want-* golden files")

// goldenCase is testdata/<case>/case.yaml.
type goldenCase struct {
	Changes []struct {
		Key   string  `yaml:"key"`
		Value any     `yaml:"value"`
		Type  string  `yaml:"type"`
		Raw   *string `yaml:"raw"`
	} `yaml:"changes"`
	Document struct {
		Index *int   `yaml:"index"`
		Kind  string `yaml:"kind"`
		Name  string `yaml:"name"`
	} `yaml:"document"`
	// DeletedLines are the input lines (1-based) the edit replaces; every
	// other input line must come out unchanged and in order.
	DeletedLines []int `yaml:"deletedLines"`
	// AddedLines is the number of output lines that are not input lines.
	AddedLines int `yaml:"addedLines"`
}

func (g goldenCase) changes(t *testing.T) []Change {
	t.Helper()
	var out []Change
	for _, c := range g.Changes {
		v := c.Value
		if c.Raw != nil {
			var err error
			if v, err = ParseValue(c.Type, *c.Raw); err != nil {
				t.Fatalf("ParseValue(%q, %q): %v", c.Type, *c.Raw, err)
			}
		}
		out = append(out, Change{Key: c.Key, Value: v})
	}
	return out
}

// TestGolden applies each testdata case to every input file of the case and
// checks the exact output, that only the expected lines changed, that the
// result decodes to the input with the changes made, and that applying the
// changes again is a no-op.
func TestGolden(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "*", "case.yaml"))
	if err != nil || len(dirs) < 5 {
		t.Fatalf("golden cases missing: %v %v", dirs, err)
	}
	for _, casePath := range dirs {
		dir := filepath.Dir(casePath)
		var gc goldenCase
		raw, err := os.ReadFile(casePath)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, &gc); err != nil {
			t.Fatalf("%s: %v", casePath, err)
		}
		inputs, _ := filepath.Glob(filepath.Join(dir, "input*"))
		if len(inputs) == 0 {
			t.Fatalf("%s: no input files", dir)
		}
		for _, in := range inputs {
			t.Run(strings.TrimPrefix(in, "testdata"+string(filepath.Separator)), func(t *testing.T) {
				runGolden(t, in, gc)
			})
		}
	}
}

func runGolden(t *testing.T, in string, gc goldenCase) {
	f, err := FormatFor(in)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	changes := gc.changes(t)
	opts := Options{Document: Document(gc.Document)}
	docIndex := 0
	if f == YAML {
		docs, err := decodeYAMLNodes(src)
		if err != nil {
			t.Fatal(err)
		}
		if docIndex, err = selectDocument(yamlDocInfos(docs), opts.Document); err != nil {
			t.Fatal(err)
		}
	}
	out, changed, err := Apply(f, src, changes, opts)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if !changed {
		t.Fatal("changed = false")
	}
	wantPath := filepath.Join(filepath.Dir(in), "want"+strings.TrimPrefix(filepath.Base(in), "input"))
	if *update {
		if err := os.WriteFile(wantPath, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(wantPath)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(out, want) {
		t.Errorf("output differs from %s:\n%s", wantPath, lineDiff(want, out))
	}

	deleted, added := diffLines(src, out)
	if !reflect.DeepEqual(deleted, nonNil(gc.DeletedLines)) || added != gc.AddedLines {
		t.Errorf("diff touches input lines %v and adds %d lines; want %v and %d\n%s",
			deleted, added, gc.DeletedLines, gc.AddedLines, lineDiff(src, out))
	}
	if bytes.Contains(src, []byte("\r\n")) && bytes.Count(out, []byte("\n")) != bytes.Count(out, []byte("\r\n")) {
		t.Error("CRLF file got LF line breaks")
	}
	if (len(src) > 0 && src[len(src)-1] == '\n') != (out[len(out)-1] == '\n') {
		t.Error("presence of the final newline changed")
	}

	// Round trip: the result decodes to the input with exactly the changes made.
	before, after := decodeDoc(t, f, src, docIndex), decodeDoc(t, f, out, docIndex)
	model := before
	for _, c := range changes {
		v, err := canonical(c.Value)
		if err != nil {
			t.Fatal(err)
		}
		p, err := parsePath(c.Key)
		if err != nil {
			t.Fatal(err)
		}
		model = setAny(model, p, v)
	}
	if !valuesEqual(model, after) {
		t.Errorf("decoded result differs from the model:\nmodel %#v\ngot   %#v", model, after)
	}
	if f == YAML {
		// The documents that were not edited are byte-identical.
		for i, d := range splitDocs(src) {
			if i != docIndex && !bytes.Contains(out, d) {
				t.Errorf("document %d changed", i)
			}
		}
	}

	again, changed, err := Apply(f, out, changes, opts)
	if err != nil || changed || !bytes.Equal(again, out) {
		t.Errorf("second Apply is not a no-op: changed=%v err=%v", changed, err)
	}
}

func nonNil(l []int) []int {
	if l == nil {
		return []int{}
	}
	return l
}

func decodeDoc(t *testing.T, f Format, b []byte, doc int) any {
	t.Helper()
	if f == JSON {
		v, err := decodeJSONValue(b)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	docs, err := decodeYAMLNodes(b)
	if err != nil {
		t.Fatal(err)
	}
	v, err := decodeYAMLValue(docs[doc])
	if err != nil {
		t.Fatal(err)
	}
	return normalizeDecoded(v)
}

// splitDocs cuts a YAML stream at its "---" lines.
func splitDocs(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(b, []byte("\n---\n")) {
		docs = append(docs, d)
	}
	return docs
}

func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	return strings.SplitAfter(string(b), "\n")
}

// diffLines compares old and new line by line (longest common subsequence)
// and returns the 1-based numbers of old lines that are not kept and the
// number of new lines that are not old ones.
func diffLines(oldB, newB []byte) (deleted []int, added int) {
	a, b := splitLines(oldB), splitLines(newB)
	// lcs[i][j] = LCS length of a[i:] and b[j:]
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	deleted = []int{}
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			deleted = append(deleted, i+1)
			i++
		default:
			added++
			j++
		}
	}
	for ; i < len(a); i++ {
		deleted = append(deleted, i+1)
	}
	added += len(b) - j
	sort.Ints(deleted)
	return deleted, added
}

// lineDiff renders a readable diff for failure messages.
func lineDiff(oldB, newB []byte) string {
	a, b := splitLines(oldB), splitLines(newB)
	deleted, _ := diffLines(oldB, newB)
	del := map[int]bool{}
	for _, d := range deleted {
		del[d] = true
	}
	var sb strings.Builder
	j := 0
	for i, l := range a {
		if del[i+1] {
			fmt.Fprintf(&sb, "-%4d %q\n", i+1, l)
			continue
		}
		for j < len(b) && b[j] != l {
			fmt.Fprintf(&sb, "+     %q\n", b[j])
			j++
		}
		j++
	}
	for ; j < len(b); j++ {
		fmt.Fprintf(&sb, "+     %q\n", b[j])
	}
	return sb.String()
}

func TestDiffLines(t *testing.T) {
	del, add := diffLines([]byte("a\nb\nc\nd\n"), []byte("a\nB\nc\nx\ny\nd\n"))
	if !reflect.DeepEqual(del, []int{2}) || add != 3 {
		t.Fatalf("diffLines = %v, %d", del, add)
	}
	del, add = diffLines([]byte("a\nb"), []byte("a\nb"))
	if len(del) != 0 || add != 0 {
		t.Fatalf("identical input: %v, %d", del, add)
	}
}
