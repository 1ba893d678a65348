package review

import (
	"fmt"
	"strings"

	udiff "github.com/aymanbagabas/go-udiff"
)

// ContextLines is the number of unchanged lines shown around each hunk (the unified diff
// default of GNU diff and git, also udiff.DefaultContextLines).
const ContextLines = 3

// LineKind is the role of one displayed diff line.
type LineKind int

const (
	LineContext LineKind = iota // unchanged, in both versions
	LineDelete                  // only in the old version (W)
	LineInsert                  // only in the new version (S)
)

// Line is one line of a hunk. Text is the raw line including its terminator ("\n", or
// "\r\n" for CRLF files); the last line of a file without a final newline has none.
type Line struct {
	Kind LineKind
	Text string
}

// Hunk is one selectable unit of a text diff: the lines a unified diff shows under one
// "@@ -OldStart,OldLines +NewStart,NewLines @@" header, and the line edits of the old
// version (byte offsets into it, from udiff.Lines) that the hunk stands for.
// Line numbers are 1-based as in the unified format.
type Hunk struct {
	OldStart, OldLines int
	NewStart, NewLines int
	Lines              []Line
	Edits              []udiff.Edit
}

// Header returns the unified-diff hunk header, "@@ -1,4 +1,5 @@".
// As in GNU diff, a side with no lines names the line before the hunk ("-0,0" for an
// empty old file).
func (h *Hunk) Header() string {
	o, n := h.OldStart, h.NewStart
	if h.OldLines == 0 {
		o--
	}
	if h.NewLines == 0 {
		n--
	}
	return fmt.Sprintf("@@ -%d,%d +%d,%d @@", o, h.OldLines, n, h.NewLines)
}

// Hunks splits the change from old to new into hunks with ContextLines lines of context,
// as go-udiff groups them for a unified diff (changes closer than 2*ContextLines lines share
// a hunk). It returns nil when old == new. Lines are split at '\n' only, so a CR of a CRLF
// file stays part of its line and the file round-trips byte for byte.
func Hunks(old, new string) ([]Hunk, error) {
	edits := udiff.Lines(old, new)
	if len(edits) == 0 {
		return nil, nil
	}
	u, err := udiff.ToUnifiedDiff("old", "new", old, edits, ContextLines)
	if err != nil {
		return nil, fmt.Errorf("build unified diff: %w", err)
	}
	hs := make([]Hunk, len(u.Hunks))
	for i, uh := range u.Hunks {
		h := &hs[i]
		h.OldStart, h.NewStart = uh.FromLine, uh.ToLine
		for _, l := range uh.Lines {
			var k LineKind
			switch l.Kind {
			case udiff.Delete:
				k = LineDelete
				h.OldLines++
			case udiff.Insert:
				k = LineInsert
				h.NewLines++
			default:
				k = LineContext
				h.OldLines++
				h.NewLines++
			}
			h.Lines = append(h.Lines, Line{Kind: k, Text: l.Content})
		}
	}
	// Give each edit to the hunk that shows it: the last hunk starting at or before the
	// edit's first old line (0-based line = number of '\n' before the edit's start).
	hi, line, pos := 0, 0, 0
	for _, e := range edits {
		line += strings.Count(old[pos:e.Start], "\n")
		pos = e.Start
		for hi+1 < len(hs) && hs[hi+1].OldStart-1 <= line {
			hi++
		}
		hs[hi].Edits = append(hs[hi].Edits, e)
	}
	return hs, nil
}

// Select returns old with only the chosen hunks applied: chosen[i] says whether hunks[i]
// (from Hunks(old, new)) is taken. All true gives new, all false gives old, byte for byte.
// It fails when len(chosen) != len(hunks) or the edits do not fit old.
func Select(old string, hunks []Hunk, chosen []bool) (string, error) {
	if len(chosen) != len(hunks) {
		return "", fmt.Errorf("select hunks: %d choices for %d hunks", len(chosen), len(hunks))
	}
	var edits []udiff.Edit
	for i := range hunks {
		if chosen[i] {
			edits = append(edits, hunks[i].Edits...)
		}
	}
	out, err := udiff.Apply(old, edits)
	if err != nil {
		return "", fmt.Errorf("apply selected hunks: %w", err)
	}
	return out, nil
}
