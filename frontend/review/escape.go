package review

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"brood.dev/brood/frontend/diff"
)

// EscapeName returns a path or name in the terminal-safe, unambiguous form `brood diff`
// prints (diff.Escape): control bytes, invalid UTF-8, C1 controls, bidirectional and other
// format characters become Go-style escapes, and a backslash becomes \\.
func EscapeName(name string) string { return diff.Escape(name) }

// EscapeLine returns one line of file content (without its '\n' terminator) in a form that
// cannot drive a terminal: C0 controls other than tab (ESC, CR, BEL, BS...), DEL and bytes
// of invalid UTF-8 are written as \x1b, \r, \a, \xff...; C1 controls (U+0080–U+009F, which
// 8-bit terminals read as CSI/OSC), format characters (Unicode category Cf: the bidi and
// zero-width controls of "Trojan Source"), line/paragraph separators and other non-graphic
// runes as \uXXXX. Tabs and backslashes pass unchanged: they are everywhere in source code
// and cannot drive a terminal, so a diff line reads as the code does.
func EscapeLine(line string) string {
	if plainLine(line) {
		return line
	}
	var b strings.Builder
	b.Grow(len(line) + 8)
	for i := 0; i < len(line); {
		r, n := utf8.DecodeRuneInString(line[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, line[i])
		case r == '\t':
			b.WriteByte('\t')
		case diff.EscapeRune(&b, r):
		default:
			b.WriteString(line[i : i+n])
		}
		i += n
	}
	return b.String()
}

// plainLine is the fast path: printable ASCII and tabs need no escaping.
func plainLine(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c >= 0x7f {
			return false
		}
	}
	return true
}
