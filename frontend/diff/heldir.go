package diff

import "strings"

// EmptiedDirs returns the indexes of the added directories among changes (sorted by
// path, as Compute returns them) that applied(i) selects but that would be created
// empty: something below them is left out and nothing below them is applied. An
// added change with changes below it is a directory. Such a directory exists only for
// the changes held back (a new `.vscode/` for a held `.vscode/tasks.json`), so an
// apply that holds them leaves it out too; a new directory with nothing below it
// (the agent made an empty directory) is not returned.
func EmptiedDirs(changes []Change, applied func(i int) bool) []int {
	hasApplied := map[string]bool{}
	hasHeld := map[string]bool{}
	mark := func(m map[string]bool, p string) {
		for {
			i := strings.LastIndexByte(p, '/')
			if i < 0 {
				return
			}
			p = p[:i]
			m[p] = true
		}
	}
	var out []int
	// In reverse path order every path below a directory comes before it.
	for i := len(changes) - 1; i >= 0; i-- {
		c := changes[i]
		switch {
		case !applied(i):
			mark(hasHeld, c.Path)
		case c.Kind == KindAdded && hasHeld[c.Path] && !hasApplied[c.Path]:
			out = append(out, i)
		default:
			mark(hasApplied, c.Path)
		}
	}
	for l, r := 0, len(out)-1; l < r; l, r = l+1, r-1 {
		out[l], out[r] = out[r], out[l]
	}
	return out
}
