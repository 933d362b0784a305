package fileedit

import (
	"bytes"
	"fmt"
	"sort"
)

// splice is a replacement of src[start:end] (an insertion when start == end).
type splice struct {
	start, end int
	text       string
	seq        int // creation order; orders insertions at the same offset
}

// splices collects the byte edits of one change. Edits never overlap; two
// insertions at the same offset land in creation order.
type splices struct {
	list []splice
}

func (s *splices) replace(start, end int, text string) {
	s.list = append(s.list, splice{start: start, end: end, text: text, seq: len(s.list)})
}

func (s *splices) insert(at int, text string) { s.replace(at, at, text) }

func (s *splices) empty() bool { return len(s.list) == 0 }

// apply returns src with all splices made.
func (s *splices) apply(src []byte) ([]byte, error) {
	l := append([]splice(nil), s.list...)
	sort.SliceStable(l, func(i, j int) bool {
		if l[i].start != l[j].start {
			return l[i].start < l[j].start
		}
		// An insertion goes before a replacement that starts at the same offset.
		if (l[i].start == l[i].end) != (l[j].start == l[j].end) {
			return l[i].start == l[i].end
		}
		return l[i].seq < l[j].seq
	})
	var b bytes.Buffer
	b.Grow(len(src) + 256)
	cursor := 0
	for _, e := range l {
		if e.start < cursor || e.end < e.start || e.end > len(src) {
			return nil, fmt.Errorf("%w: overlapping edits at byte %d", errEditCheck, e.start)
		}
		b.Write(src[cursor:e.start])
		b.WriteString(e.text)
		cursor = e.end
	}
	b.Write(src[cursor:])
	return b.Bytes(), nil
}
