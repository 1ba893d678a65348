package review

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// hostile holds byte sequences that drive terminals: an OSC 52 clipboard write, a carriage
// return (overwrites the line), a clear-screen CSI, BEL, an 8-bit CSI (U+009B) and a
// right-to-left override.
var hostile = []string{"\x1b]52;c;ZWNobyBwd25lZAo=\a", "\r", "\x1b[2J", "\a", "\u009b31m", "\u202e", "\xff\x9b"}

func TestEscapeLine(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain\tcode \\n", "plain\tcode \\n"},
		{"\x1b]52;c;ZWNobyBwd25lZAo=\a", `\x1b]52;c;ZWNobyBwd25lZAo=\a`},
		{"a\rb", `a\rb`},
		{"\x1b[2Jx", `\x1b[2Jx`},
		{"\u009b31m", `\u009b31m`},
		{"x\u202eevil", `x\u202eevil`},
		{"\xff\x9b", `\xff\x9b`},
		{"héllo wörld ✓", "héllo wörld ✓"},
		{"nul\x00del\x7f", `nul\x00del\x7f`},
	}
	for _, c := range cases {
		if got := EscapeLine(c.in); got != c.want {
			t.Errorf("EscapeLine(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestEscapeName(t *testing.T) {
	for _, h := range hostile {
		got := EscapeName("dir/" + h + "name")
		if strings.ContainsAny(got, "\x1b\r\a\u009b\u202e") || strings.Contains(got, "\xff") {
			t.Errorf("EscapeName(%q) = %q still holds a control", h, got)
		}
	}
	if got := EscapeName(`a\b`); got != `a\\b` {
		t.Errorf("backslash: %q", got)
	}
}

// assertInert fails unless every ESC in out starts one of the SGR color sequences the
// review writes itself, and out has no CR, BEL or C1 control.
func assertInert(t *testing.T, out string) {
	t.Helper()
	if i := strings.IndexAny(out, "\r\a\u009b\u009d\u202e"); i >= 0 {
		t.Fatalf("output holds a control at %d: %q", i, out[max(0, i-40):min(len(out), i+40)])
	}
	allowed := []string{sgrReset, sgrBold, sgrRed, sgrGreen, sgrYellow, sgrCyan, sgrBoldRed}
	for i := 0; i < len(out); i++ {
		if out[i] != 0x1b {
			continue
		}
		ok := false
		for _, a := range allowed {
			if strings.HasPrefix(out[i:], a) {
				ok = true
			}
		}
		if !ok {
			t.Fatalf("foreign escape sequence at %d: %q", i, out[i:min(len(out), i+30)])
		}
	}
}

// inert reports the first byte of out a terminal could act on besides '\n' and '\t': C0
// controls, DEL, invalid UTF-8, C1 controls and format characters.
func inert(out string) (int, bool) {
	for i := 0; i < len(out); {
		r, n := utf8.DecodeRuneInString(out[i:])
		switch {
		case r == '\n' || r == '\t':
		case r < 0x20 || r == 0x7f || (r == utf8.RuneError && n == 1):
			return i, false
		case r >= 0x80 && (r <= 0x9f || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Cf, r) || !unicode.IsGraphic(r)):
			return i, false // stated here independently of diff.EscapeRune
		}
		i += n
	}
	return 0, true
}

func FuzzEscapeLine(f *testing.F) {
	for _, h := range hostile {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if i, ok := inert(EscapeLine(s)); !ok {
			t.Fatalf("EscapeLine(%q) leaves a control at %d", s, i)
		}
		if i, ok := inert(EscapeName(s)); !ok || strings.Contains(EscapeName(s), "\t") {
			t.Fatalf("EscapeName(%q) leaves a control at %d", s, i)
		}
	})
}

// FuzzRenderDiff renders the diff of any two contents (no color) and requires the screen
// to be inert: every byte that came from the files is escaped.
func FuzzRenderDiff(f *testing.F) {
	f.Add("a\nb\n", "a\n\x1b]52;c;eA==\a\r\n")
	f.Add("x\r\ny", "\x1b[2J\u009b\u202e")
	f.Add("\ufffd\xff", "\ufffd")
	f.Fuzz(func(t *testing.T, old, new string) {
		if len(old)+len(new) > 8192 {
			return
		}
		hs, err := Hunks(old, new)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		p := &printer{w: &b}
		p.hunks("W "+EscapeName(old), "S "+EscapeName(new), hs, 0)
		p.text(old, 0)
		if i, ok := inert(b.String()); !ok {
			t.Fatalf("rendered diff holds a control at %d: %q", i, b.String())
		}
	})
}
