package pipelines

import (
	"bytes"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// SyntaxError reports a YAML parse error of src as a LoadError at the line of the mistake,
// with the message once prefixed ("YAML: did not find expected key"). yaml.v3 puts in its
// message the line where the enclosing block or flow began, often lines above the mistake;
// the mistake's line is the first one at which the file's beginning fails to parse with the
// same message, found by bisection (about log2(lines) parses of parts of the file). Past
// maxBisect bytes the bisection would cost too much for one error message: yaml's line stays.
func SyntaxError(file string, src []byte, err error) *LoadError {
	msg, line := splitYAMLError(err.Error())
	if len(src) > maxBisect {
		return &LoadError{[]FieldError{{File: file, Line: line, Msg: "YAML: " + msg}}}
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
	return &LoadError{[]FieldError{{File: file, Line: line, Msg: "YAML: " + msg}}}
}

// maxBisect bounds the files SyntaxError bisects (pipelines are far smaller).
const maxBisect = 256 << 10

// splitYAMLError splits "yaml: line 3: did not find expected key" into the message and line.
func splitYAMLError(s string) (string, int) {
	s = strings.TrimPrefix(s, "yaml: ")
	line := 0
	if m := yamlLineRE.FindStringSubmatch(s); m != nil && strings.HasPrefix(s, "line ") {
		line, _ = strconv.Atoi(m[1])
		s = strings.TrimPrefix(m[2], " ")
	}
	return s, line
}
