package gitengine

import (
	"bytes"
	"errors"
)

// errDiffTooLarge stops a line diff whose edit distance would cost too much memory; the file is
// then reported as a conflict instead of being merged line by line.
var errDiffTooLarge = errors.New("diff too large")

// maxEditDistance bounds the Myers search (memory grows with its square).
const maxEditDistance = 4000

// hunk replaces base lines [bs, be) with side lines [ss, se).
type hunk struct{ bs, be, ss, se int }

// mergeLines merges two edits of base line by line, like git's default merge: changes to
// disjoint, non-adjacent line ranges combine; overlapping or touching changes conflict unless
// both sides made the same change. Binary content (a NUL byte) only merges when one side is
// unchanged. ok is false on conflict.
func mergeLines(base, ours, theirs []byte) (merged []byte, ok bool) {
	switch {
	case bytes.Equal(ours, theirs):
		return ours, true
	case bytes.Equal(base, ours):
		return theirs, true
	case bytes.Equal(base, theirs):
		return ours, true
	}
	if isBinary(base) || isBinary(ours) || isBinary(theirs) {
		return nil, false
	}
	ids := map[string]int{}
	bl, bi := splitLines(base, ids)
	ol, oi := splitLines(ours, ids)
	tl, ti := splitLines(theirs, ids)
	oh, err := diffHunks(bi, oi)
	if err != nil {
		return nil, false
	}
	th, err := diffHunks(bi, ti)
	if err != nil {
		return nil, false
	}
	var out [][]byte
	pos, i, j := 0, 0, 0
	for i < len(oh) || j < len(th) {
		// Start a group with the earliest hunk, then absorb every hunk of either side that
		// overlaps or touches the group.
		gs, ge := 0, 0
		var og, tg []hunk
		if j >= len(th) || (i < len(oh) && oh[i].bs <= th[j].bs) {
			gs, ge = oh[i].bs, oh[i].be
			og = append(og, oh[i])
			i++
		} else {
			gs, ge = th[j].bs, th[j].be
			tg = append(tg, th[j])
			j++
		}
		for grew := true; grew; {
			grew = false
			for i < len(oh) && oh[i].bs <= ge {
				og = append(og, oh[i])
				ge = max(ge, oh[i].be)
				i++
				grew = true
			}
			for j < len(th) && th[j].bs <= ge {
				tg = append(tg, th[j])
				ge = max(ge, th[j].be)
				j++
				grew = true
			}
		}
		out = append(out, bl[pos:gs]...)
		switch {
		case len(tg) == 0:
			out = append(out, sideRange(bl, ol, og, gs, ge)...)
		case len(og) == 0:
			out = append(out, sideRange(bl, tl, tg, gs, ge)...)
		default:
			a := sideRange(bl, ol, og, gs, ge)
			b := sideRange(bl, tl, tg, gs, ge)
			if !sameLines(a, b) {
				return nil, false
			}
			out = append(out, a...)
		}
		pos = ge
	}
	out = append(out, bl[pos:]...)
	return bytes.Join(out, nil), true
}

// sideRange is one side's text for base lines [gs, ge), given that side's hunks inside it.
func sideRange(base, side [][]byte, hs []hunk, gs, ge int) [][]byte {
	var out [][]byte
	pos := gs
	for _, h := range hs {
		out = append(out, base[pos:h.bs]...)
		out = append(out, side[h.ss:h.se]...)
		pos = h.be
	}
	return append(out, base[pos:ge]...)
}

func sameLines(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func isBinary(b []byte) bool {
	n := min(len(b), 8000)
	return bytes.IndexByte(b[:n], 0) >= 0
}

// splitLines splits after each '\n' (the last line may lack one) and maps each distinct line to
// a small integer so the diff compares ints.
func splitLines(b []byte, ids map[string]int) ([][]byte, []int) {
	var lines [][]byte
	var out []int
	for len(b) > 0 {
		n := bytes.IndexByte(b, '\n') + 1
		if n == 0 {
			n = len(b)
		}
		l := b[:n]
		id, ok := ids[string(l)]
		if !ok {
			id = len(ids)
			ids[string(l)] = id
		}
		lines = append(lines, l)
		out = append(out, id)
		b = b[n:]
	}
	return lines, out
}

// diffHunks returns the hunks that turn a into b, in order.
func diffHunks(a, b []int) ([]hunk, error) {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	am, bm := a[pre:len(a)-suf], b[pre:len(b)-suf]
	matches, err := myersMatches(am, bm)
	if err != nil {
		return nil, err
	}
	var hs []hunk
	pi, pj := 0, 0
	for _, m := range append(matches, [2]int{len(am), len(bm)}) {
		if m[0] > pi || m[1] > pj {
			hs = append(hs, hunk{bs: pi + pre, be: m[0] + pre, ss: pj + pre, se: m[1] + pre})
		}
		pi, pj = m[0]+1, m[1]+1
	}
	slideDown(hs, a, b)
	return hs, nil
}

// slideDown moves each pure insertion or deletion as far down as equal lines allow, as git's
// diff does, so that ambiguous alignments (deleting one of two equal lines) resolve the same way
// and merges conflict where git's would.
func slideDown(hs []hunk, a, b []int) {
	for i := range hs {
		h := &hs[i]
		limitA, limitB := len(a), len(b)
		if i+1 < len(hs) {
			limitA, limitB = hs[i+1].bs, hs[i+1].ss
		}
		switch {
		case h.ss == h.se && h.bs < h.be: // deletion of a[bs:be]
			for h.be < limitA && a[h.bs] == a[h.be] {
				h.bs++
				h.be++
				h.ss++
				h.se++
			}
		case h.bs == h.be && h.ss < h.se: // insertion of b[ss:se]
			for h.se < limitB && b[h.ss] == b[h.se] {
				h.bs++
				h.be++
				h.ss++
				h.se++
			}
		}
	}
}

// myersMatches returns the matched index pairs of a shortest edit script between a and b
// (Myers' O(ND) algorithm, keeping only the diagonals each step touched).
func myersMatches(a, b []int) ([][2]int, error) {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		return nil, nil
	}
	maxD := n + m
	off := maxD + 1
	v := make([]int, 2*maxD+3)
	var trace [][]int
	found := -1
	for d := 0; d <= maxD; d++ {
		if d > maxEditDistance {
			return nil, errDiffTooLarge
		}
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				found = d
				break
			}
		}
		snap := make([]int, 2*d+1)
		copy(snap, v[off-d:off+d+1])
		trace = append(trace, snap)
		if found >= 0 {
			break
		}
	}
	var rev [][2]int
	x, y := n, m
	for d := found; d > 0; d-- {
		prev := trace[d-1] // index k+(d-1)
		at := func(k int) int { return prev[k+d-1] }
		k := x - y
		var pk int
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := at(pk)
		py := px - pk
		sx, sy := px, py+1 // moved down: inserted b[py]
		if pk == k-1 {
			sx, sy = px+1, py // moved right: deleted a[px]
		}
		for x > sx && y > sy {
			x--
			y--
			rev = append(rev, [2]int{x, y})
		}
		x, y = px, py
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, [2]int{x, y})
	}
	out := make([][2]int, len(rev))
	for i := range rev {
		out[i] = rev[len(rev)-1-i]
	}
	return out, nil
}
