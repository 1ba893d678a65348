package diff

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape renders a raw name (any bytes except NUL and, for a path, '/') as one
// terminal-safe line. Printable characters pass through; everything else is written as a
// Go-style escape so the result never contains a byte a terminal interprets:
//
//	\\            a backslash (so the encoding is unambiguous and reversible)
//	\a \b \f \n \r \t \v, \xNN   other C0 controls, DEL (\x7f) and bytes of invalid UTF-8
//	\uXXXX        C1 controls (U+0080–U+009F), bidirectional controls (U+202A–U+202E,
//	              U+2066–U+2069, U+200E/F, U+061C), zero-width and other format characters
//	              (Unicode category Cf), line/paragraph separators and any non-graphic rune
//
// strconv.Unquote of `"` + Escape(s) + `"` (with `"` escaped) gives s back.
func Escape(name string) string {
	if isPlain(name) {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 8)
	for i := 0; i < len(name); {
		r, n := utf8.DecodeRuneInString(name[i:])
		if r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&b, `\x%02x`, name[i])
			i++
			continue
		}
		i += n
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case EscapeRune(&b, r):
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// isPlain reports whether s is printable ASCII without a backslash (the common case,
// returned by Escape unchanged without allocating).
func isPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

// unsafeRune reports whether a valid non-ASCII (or DEL) rune must be escaped on a
// terminal: C1 controls, format characters (Cf, which holds the bidi and zero-width
// controls), line and paragraph separators, and anything unicode does not call graphic.
func unsafeRune(r rune) bool {
	if r >= 0x80 && r <= 0x9f {
		return true
	}
	if unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
		return true
	}
	return !unicode.IsGraphic(r)
}

// unsafeName reports whether a name holds a character Escape would have to escape for
// safety (everything except a backslash, which is an ordinary file name byte). Invalid
// UTF-8 is not unsafe by itself (legacy Latin-1 names), except bytes 0x80–0x9f, which
// 8-bit terminals read as C1 controls (0x9b is CSI).
func unsafeName(name string) bool {
	for i := 0; i < len(name); {
		c := name[i]
		if c < 0x80 {
			if c < 0x20 || c == 0x7f {
				return true
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(name[i:])
		if r == utf8.RuneError && n == 1 {
			if c >= 0x80 && c <= 0x9f {
				return true
			}
			i++
			continue
		}
		if unsafeRune(r) {
			return true
		}
		i += n
	}
	return false
}

// CheckPath validates a relative, '/'-separated path from a manifest or a tree walk
// before anything is flushed to it. It returns, wrapped with the escaped path:
// ErrEmptyPath; ErrNUL; ErrEscapesRoot for an absolute path or a component "", "." or
// ".."; ErrControlByte for a control, bidirectional or invisible formatting character
// (see Escape). Invalid UTF-8 alone is allowed (the JSON output carries it as path_b64).
func CheckPath(p string) error {
	if p == "" {
		return ErrEmptyPath
	}
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("path %s: %w", Escape(p), ErrNUL)
	}
	if p[0] == '/' {
		return fmt.Errorf("path %s: %w", Escape(p), ErrEscapesRoot)
	}
	for rest := p; ; {
		comp, tail, more := strings.Cut(rest, "/")
		if comp == "" || comp == "." || comp == ".." {
			return fmt.Errorf("path %s: %w", Escape(p), ErrEscapesRoot)
		}
		if !more {
			break
		}
		rest = tail
	}
	if unsafeName(p) {
		return fmt.Errorf("path %s: %w", Escape(p), ErrControlByte)
	}
	return nil
}

// EscapeRune writes the escape of r to b and reports true when r must not reach a terminal
// raw: C0 controls and DEL as \a \b \f \n \r \t \v or \xNN, and C1 controls, format
// characters (Unicode Cf: bidi and zero-width controls), U+2028/U+2029 and non-graphic runes
// as \uXXXX or \UXXXXXXXX. It writes nothing and returns false for every other rune.
// Escape (names) and the review's diff-line escaper share it.
func EscapeRune(b *strings.Builder, r rune) bool {
	switch {
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
			fmt.Fprintf(b, `\x%02x`, r)
		}
		return true
	case r >= 0x80 && unsafeRune(r):
		if r > 0xffff {
			fmt.Fprintf(b, `\U%08x`, r)
		} else {
			fmt.Fprintf(b, `\u%04x`, r)
		}
		return true
	}
	return false
}
