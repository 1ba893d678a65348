package diff

import (
	"bytes"
	"strings"

	udiff "github.com/aymanbagabas/go-udiff"
)

// LineCounts counts the lines added and deleted between two contents, as `git diff
// --numstat` does: a last line without a newline counts as a line. Binary contents
// (IsBinary) and equal contents count 0 and 0. The diffstat of `brood diff` and the
// per-commit statistics of the git review both use it.
func LineCounts(before, after []byte) (added, deleted int) {
	if IsBinary(before) || IsBinary(after) || bytes.Equal(before, after) {
		return 0, 0
	}
	for _, e := range udiff.Lines(string(before), string(after)) {
		deleted += strings.Count(string(before[e.Start:e.End]), "\n")
		if e.End > e.Start && before[e.End-1] != '\n' {
			deleted++
		}
		added += strings.Count(e.New, "\n")
		if e.New != "" && !strings.HasSuffix(e.New, "\n") {
			added++
		}
	}
	return added, deleted
}
