package review

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/digest"
)

// SGR sequences (ECMA-48 Select Graphic Rendition) brood itself writes; content is escaped
// before it is printed, so these are the only escape sequences on the screen.
const (
	sgrReset   = "\x1b[0m"
	sgrBold    = "\x1b[1m"
	sgrRed     = "\x1b[31m"
	sgrGreen   = "\x1b[32m"
	sgrYellow  = "\x1b[33m"
	sgrCyan    = "\x1b[36m"
	sgrBoldRed = "\x1b[1;31m"
)

// printer writes review output, coloring only when color is set (a terminal, NO_COLOR
// unset). The first write error is kept in err and later writes are dropped.
type printer struct {
	w     io.Writer
	color bool
	err   error
}

func (p *printer) printf(format string, a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, a...)
	}
}

// paint wraps text (already escaped) in the SGR sequence code when coloring.
func (p *printer) paint(code, text string) string {
	if !p.color || text == "" {
		return text
	}
	return code + text + sgrReset
}

// header prints the first lines of a change: position, kind, escaped path, line counts,
// then the risk flag (red), the refusal or conflict reason, what the apply does to the
// mode (diff.ModeNote; red when it widens access) and the rename hint.
func (p *printer) header(i, n int, c diff.Change, stat string) {
	p.printf("\n%s %s  %s", p.paint(sgrBold, fmt.Sprintf("[%d/%d]", i+1, n)),
		p.paint(kindColor(c.Kind), string(c.Kind)), p.paint(sgrBold, EscapeName(c.Path)))
	if stat != "" {
		p.printf("  (%s)", stat)
	}
	p.printf("\n")
	if c.Risk != "" {
		p.printf("  %s\n", p.paint(sgrBoldRed, "HIGH RISK: "+EscapeLine(c.Risk)))
	}
	if c.Reason != "" {
		label := "reason"
		if c.Kind == diff.KindRefused {
			label = "refused"
		}
		p.printf("  %s: %s\n", label, p.paint(kindColor(c.Kind), EscapeLine(c.Reason)))
	}
	if n := diff.ModeNote(c); n != "" {
		code := sgrBold
		if diff.Widened(c) != "" {
			code = sgrBoldRed
		}
		p.printf("  %s\n", p.paint(code, n))
	} else if c.OldMode != 0 && c.NewMode != 0 && c.OldMode != c.NewMode && c.Kind != diff.KindType {
		p.printf("  mode %04o -> %04o\n", c.OldMode, c.NewMode)
	}
	if c.SameAs != "" {
		p.printf("  same content as deleted %s (likely a rename)\n", EscapeName(c.SameAs))
	}
}

func kindColor(k diff.Kind) string {
	switch k {
	case diff.KindAdded:
		return sgrGreen
	case diff.KindDeleted:
		return sgrRed
	case diff.KindConflict:
		return sgrYellow
	case diff.KindRefused:
		return sgrBoldRed
	}
	return sgrCyan
}

// hunks prints a unified diff of hs under the labels, at most maxLines diff lines (0: no
// limit), and returns how many lines were left out.
func (p *printer) hunks(oldLabel, newLabel string, hs []Hunk, maxLines int) (omitted int) {
	if len(hs) == 0 {
		p.printf("  (no content change)\n")
		return 0
	}
	p.printf("%s\n%s\n", p.paint(sgrBold, "--- "+oldLabel), p.paint(sgrBold, "+++ "+newLabel))
	shown := 0
	for i := range hs {
		if maxLines > 0 && shown >= maxLines {
			omitted += len(hs[i].Lines)
			continue
		}
		p.printf("%s\n", p.paint(sgrCyan, hs[i].Header()))
		for j, l := range hs[i].Lines {
			if maxLines > 0 && shown >= maxLines {
				omitted += len(hs[i].Lines) - j
				break
			}
			p.line(l)
			shown++
		}
	}
	if omitted > 0 {
		p.printf("  ... %d more diff lines (v shows all)\n", omitted)
	}
	return omitted
}

// hunk prints one hunk with its header.
func (p *printer) hunk(h *Hunk) {
	p.printf("%s\n", p.paint(sgrCyan, h.Header()))
	for _, l := range h.Lines {
		p.line(l)
	}
}

// line prints one diff line: its sign, the escaped text without the '\n' terminator, and
// the unified-diff marker when the line has no final newline.
func (p *printer) line(l Line) {
	text, nl := strings.CutSuffix(l.Text, "\n")
	switch l.Kind {
	case LineDelete:
		p.printf("%s\n", p.paint(sgrRed, "-"+EscapeLine(text)))
	case LineInsert:
		p.printf("%s\n", p.paint(sgrGreen, "+"+EscapeLine(text)))
	default:
		p.printf(" %s\n", EscapeLine(text))
	}
	if !nl {
		p.printf("\\ No newline at end of file\n")
	}
}

// binary prints the sizes and content digests (package digest, format brood-content-v1:
// not a file's SHA-256, so labelled "digest:") of both sides of a binary change.
func (p *printer) binary(c diff.Change, old, new []byte, haveOld, haveNew bool) {
	side := func(label string, b []byte, have bool, size int64, sum []byte) {
		if have {
			size, sum = int64(len(b)), digest.Bytes(b)
		}
		if size == 0 && sum == nil {
			p.printf("  %-4s (none)\n", label)
			return
		}
		p.printf("  %-4s %d bytes  digest:%s\n", label, size, hexOrUnknown(sum))
	}
	p.printf("  binary file\n")
	side("W", old, haveOld, c.OldSize, c.OldHash)
	side("S", new, haveNew, c.NewSize, c.NewHash)
}

func hexOrUnknown(b []byte) string {
	if b == nil {
		return "(not hashed)"
	}
	return hex.EncodeToString(b)
}

// diffStat returns "+a -d" for hs.
func diffStat(hs []Hunk) string {
	var a, d int
	for i := range hs {
		for _, l := range hs[i].Lines {
			switch l.Kind {
			case LineInsert:
				a++
			case LineDelete:
				d++
			}
		}
	}
	return fmt.Sprintf("+%d -%d", a, d)
}

// isBinary reports whether b looks binary: a NUL byte in its first 8000 bytes (the
// heuristic of git's buffer_is_binary and GNU diff).
func isBinary(b []byte) bool {
	return bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0
}

// text prints content in full (escaped, numbered), at most maxLines lines; conflict markers
// are highlighted.
func (p *printer) text(content string, maxLines int) {
	for i, l := range splitLines(content) {
		if maxLines > 0 && i >= maxLines {
			p.printf("  ... %d more lines\n", len(splitLines(content))-maxLines)
			return
		}
		t, nl := strings.CutSuffix(l, "\n")
		s := EscapeLine(t)
		if strings.HasPrefix(t, "<<<<<<< ") || strings.HasPrefix(t, ">>>>>>> ") ||
			strings.HasPrefix(t, "||||||| ") || t == MarkerSep {
			s = p.paint(sgrBoldRed, s)
		}
		p.printf("%5d  %s\n", i+1, s)
		if !nl {
			p.printf("\\ No newline at end of file\n")
		}
	}
}

// splitLines splits s after each '\n', keeping terminators; a last line without one is kept.
func splitLines(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			return append(out, s)
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}
