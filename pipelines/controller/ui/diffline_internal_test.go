package ui

import (
	"strings"
	"testing"
)

// diffLines classes each line and splits the key off YAML lines only where YAML has one: not
// in a comment, a quoted or flow scalar, a URL's colon, or "a:b" without a space.
func TestDiffLines(t *testing.T) {
	diff := "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-  image: http://registry:5000/web:1.4.1\n+  image: http://registry:5000/web:1.5.0\n" +
		"   # replicas: 3\n-    - name: web\n+ \"quoted: key\": 1\n+ url:http://x\n+ {a: b}\n+ key:\n-\n \n+- item\n"
	want := []diffLine{
		{Class: "file", Rest: "--- a/x"}, {Class: "file", Rest: "+++ b/x"}, {Class: "hunk", Rest: "@@ -1,2 +1,2 @@"},
		{Class: "del", Mark: "-", Lead: "  ", Key: "image:", Rest: " http://registry:5000/web:1.4.1"},
		{Class: "add", Mark: "+", Lead: "  ", Key: "image:", Rest: " http://registry:5000/web:1.5.0"},
		{Class: "ctx", Mark: " ", Rest: "  # replicas: 3"},
		{Class: "del", Mark: "-", Lead: "    - ", Key: "name:", Rest: " web"},
		{Class: "add", Mark: "+", Rest: ` "quoted: key": 1`},
		{Class: "add", Mark: "+", Rest: " url:http://x"},
		{Class: "add", Mark: "+", Rest: " {a: b}"},
		{Class: "add", Mark: "+", Lead: " ", Key: "key:", Rest: ""},
		{Class: "del", Mark: "-", Rest: ""},
		{Class: "ctx", Mark: " ", Rest: ""},
		{Class: "add", Mark: "+", Rest: "- item"},
	}
	got := diffLines(diff)
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	h := string(diffHTML(diffLines("+  motd: <script>alert(1)</script>\n")))
	if strings.Contains(h, "<script>") || !strings.Contains(h, `<b class="yk">motd:</b> &lt;script&gt;alert(1)&lt;/script&gt;`) {
		t.Errorf("diffHTML: %s", h)
	}
	if diffLines("") != nil {
		t.Error("an empty diff has lines")
	}
}
