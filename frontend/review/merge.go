package review

import (
	"strings"

	udiff "github.com/aymanbagabas/go-udiff"
)

// Conflict markers written by Merge3, in the diff3 style of git merge-file --diff3 so that
// editors and merge tools recognise them.
const (
	MarkerMine   = "<<<<<<< W (yours)"
	MarkerBase   = "||||||| base (snapshot time)"
	MarkerSep    = "======="
	MarkerTheirs = ">>>>>>> S (agent)"
)

// Merge3 is a line-based three-way merge (diff3) of mine (W now) and theirs (S) against
// their common base (W at snapshot time). It computes the line edits base→mine and
// base→theirs with go-udiff, groups edits of the two sides that overlap or touch into one
// region, and for each region takes the side that changed it; when both sides changed a
// region differently it writes both versions and the base between conflict markers.
// It returns the merged text and the number of conflicting regions (0: a clean merge).
//
// Adjacent edits from the two sides count as a conflict (as in git): a merge is never
// guessed. Merge3(b, b, t) == t, Merge3(b, m, b) == m and Merge3(b, x, x) == x, all clean.
func Merge3(base, mine, theirs string) (merged string, conflicts int) {
	type tagged struct {
		udiff.Edit
		side int // 0 mine, 1 theirs
	}
	xs, ys := udiff.Lines(base, mine), udiff.Lines(base, theirs)
	all := make([]tagged, 0, len(xs)+len(ys))
	for i, j := 0, 0; i < len(xs) || j < len(ys); {
		if j == len(ys) || (i < len(xs) && (xs[i].Start < ys[j].Start ||
			xs[i].Start == ys[j].Start && xs[i].End <= ys[j].End)) {
			all = append(all, tagged{xs[i], 0})
			i++
		} else {
			all = append(all, tagged{ys[j], 1})
			j++
		}
	}
	var b strings.Builder
	pos := 0 // bytes of base already written or consumed
	for k := 0; k < len(all); {
		lo, hi := all[k].Start, all[k].End
		var side [2][]udiff.Edit
		for ; k < len(all) && (all[k].Start <= hi); k++ {
			e := all[k]
			if e.End > hi {
				hi = e.End
			}
			side[e.side] = append(side[e.side], udiff.Edit{Start: e.Start - lo, End: e.End - lo, New: e.New})
		}
		b.WriteString(base[pos:lo])
		pos = hi
		region := base[lo:hi]
		version := func(s int) string {
			out, err := udiff.Apply(region, side[s])
			if err != nil {
				panic("review: merge3: inconsistent line edits: " + err.Error()) // edits come from udiff.Lines on base
			}
			return out
		}
		switch {
		case side[1] == nil:
			b.WriteString(version(0))
		case side[0] == nil:
			b.WriteString(version(1))
		default:
			m, t := version(0), version(1)
			if m == t {
				b.WriteString(m)
				continue
			}
			conflicts++
			writeSection(&b, MarkerMine, m)
			writeSection(&b, MarkerBase, region)
			writeSection(&b, MarkerSep, t)
			b.WriteString(MarkerTheirs + "\n")
		}
	}
	b.WriteString(base[pos:])
	return b.String(), conflicts
}

// writeSection writes a marker line and text, ending text with a newline if it lacks one
// so that the next marker starts a line.
func writeSection(b *strings.Builder, marker, text string) {
	b.WriteString(marker + "\n")
	b.WriteString(text)
	if text != "" && !strings.HasSuffix(text, "\n") {
		b.WriteByte('\n')
	}
}
