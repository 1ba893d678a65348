package review

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// EscapeName returns name in a form that is safe to print on a terminal and unambiguous:
// every byte that is not printable UTF-8 is written as a Go-style escape (\x1b, \r, \n, \t,
// \xff for invalid UTF-8), C1 controls (U+0080–U+009F, which some terminals take as CSI/OSC)
// and the bidirectional overrides used in "Trojan Source" attacks (U+202A–U+202E,
// U+2066–U+2069, U+200E, U+200F, U+061C) as \u escapes, and a backslash as \\ so that an
// escape in the output can never be confused with a literal backslash in the name.
func EscapeName(name string) string { return escape(name, true) }

// EscapeLine is EscapeName for one line of file content without its line terminator: the
// same bytes are escaped except that a tab is kept and a backslash is printed as is (source
// code is full of both and they cannot drive a terminal).
func EscapeLine(line string) string { return escape(line, false) }

func escape(s string, name bool) string {
	if safe(s, name) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\' && name:
			b.WriteString(`\\`)
		case r == '\t' && !name:
			b.WriteByte('\t')
		case r < 0x20 || r == 0x7f:
			switch r {
			case '\a':
				b.WriteString(`\a`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			case '\v':
				b.WriteString(`\v`)
			default:
				fmt.Fprintf(&b, `\x%02x`, r)
			}
		case dangerousRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// safe is the fast path: plain printable ASCII (and tab in lines) needs no escaping.
func safe(s string, name bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || c == 0x7f || (c < 0x20 && (name || c != '\t')) || (name && c == '\\') {
			return false
		}
	}
	return true
}

// dangerousRune reports the non-ASCII code points that are escaped: C1 controls (ECMA-48
// §5.3: 0x9b is CSI, 0x9d is OSC in 8-bit form), bidirectional formatting characters
// (Unicode UAX #9: LRE, RLE, PDF, LRO, RLO, LRI, RLI, FSI, PDI, LRM, RLM, ALM), line and
// paragraph separators, and the byte-order mark / zero-width no-break space.
func dangerousRune(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x200e, r == 0x200f, r == 0x061c, r == 0x2028, r == 0x2029, r == 0xfeff:
		return true
	}
	return false
}
