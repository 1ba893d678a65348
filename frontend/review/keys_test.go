package review

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// filterKeys feeds in to a fresh keyFilter and returns the bytes it reports as keys.
func filterKeys(in string) string {
	var f keyFilter
	var out []byte
	for i := 0; i < len(in); i++ {
		if f.key(in[i]) {
			out = append(out, in[i])
		}
	}
	return string(out)
}

// TestKeyFilter checks what keyFilter keeps of terminal replies and keys: nothing of a
// sequence or string in any of its 7-bit, 8-bit and UTF-8-encoded C1 forms, the keys
// around them.
func TestKeyFilter(t *testing.T) {
	cases := []struct{ in, want string }{
		{"a", "a"},
		{"\x1b[A\x1b[1;5Cx", "x"},                                // arrow keys (CSI)
		{"\x1bOPy", "y"},                                         // F1 in SS3 form
		{"\x1bP1$r0;1m\x1b\\n", "n"},                             // DECRQSS reply (DCS ... ST)
		{"\x1bP>|ry-term(1.0)\x1b\\a", "a"},                      // XTVERSION reply
		{"\x1b]11;rgb:1e1e/1e1e/1e1e\x07s", "s"},                 // OSC 11 reply ended by BEL
		{"\x1b]11;rgb:ffff/ffff/ffff\x1b\\q", "q"},               // OSC 11 reply ended by ST
		{"\x1b]52;c;eXJ5cnk=\x07v", "v"},                         // OSC 52 clipboard reply
		{"\x1b_Gi=1;OK\x1b\\h", "h"},                             // APC (kitty graphics reply)
		{"\x1b^ry\x1b\\?", "?"},                                  // PM
		{"\x1bXry\x1b\\w", "w"},                                  // SOS
		{"\x90ry\x9cm", "m"},                                     // 8-bit DCS and ST
		{"\x9d11;ry\x07t", "t"},                                  // 8-bit OSC, BEL
		{"\x9b2;2Ry", "y"},                                       // 8-bit CSI
		{"\x8fRa", "a"},                                          // 8-bit SS3
		{"\xc2\x90ry\xc2\x9cs", "s"},                             // C1 in UTF-8
		{"\xc2\x9b1;1Rn", "n"},                                   // CSI in UTF-8
		{"\x1bP1$r\x1b]11;ry\x07a", "a"},                         // ESC in a string starts a new one
		{"\x1bPr\x18y\x1a\x1b\\a", "a"},                          // CAN and SUB do not end a string
		{"\x1b]11;r\x03", "\x03"},                                // Ctrl-C always gets through
		{"é\xc3\x90ñ€😀a", "a"},                                   // UTF-8 keys are dropped whole
		{"\x1b]2;\xc5\x9cy\x1b\\a", "a"},                         // 0x9c continuing a character is no ST
		{"\x1bya", "a"},                                          // Alt+y
		{"\xff\xc0r", "r"},                                       // bytes no UTF-8 starts with
		{"\x1b[?1;2c\x1b[>0;95;0c\x1b[2;1R\x1b[?2004;1$yo", "o"}, // DA1, DA2, CPR, DECRPM
	}
	for _, c := range cases {
		if got := filterKeys(c.in); got != c.want {
			t.Errorf("keys of %q = %q, want %q", c.in, got, c.want)
		}
	}
}

// stringForms are the introducers of the control strings (OSC, DCS, APC, PM, SOS) in
// their 7-bit, 8-bit and UTF-8 forms.
var stringForms = []string{
	"\x1b]", "\x1bP", "\x1b_", "\x1b^", "\x1bX",
	"\x9d", "\x90", "\x9f", "\x9e", "\x98",
	"\xc2\x9d", "\xc2\x90", "\xc2\x9f", "\xc2\x9e", "\xc2\x98",
}

// stringEnds are the terminators of a control string: ST (7-bit, 8-bit, UTF-8) and BEL.
var stringEnds = []string{"\x1b\\", "\x07", "\x9c", "\xc2\x9c"}

// payload makes data the content of a control string ended by end: without Ctrl-C,
// Ctrl-D, BEL, ESC and ST, and for an 8-bit or UTF-8 ST valid UTF-8 (so that the ST is
// not taken for the end of a character data left open).
func payload(data []byte, end string) string {
	b := make([]byte, 0, len(data))
	for _, c := range data {
		switch c {
		case 0x03, 0x04, 0x07, 0x1b, 0x9c:
		default:
			b = append(b, c)
		}
	}
	s := string(b)
	if end != "\x1b\\" && end != "\x07" {
		s = strings.ToValidUTF8(s, "")
	}
	return s
}

// FuzzKeyFilter checks keyFilter on any input: every key it reports is ASCII, and a
// control string of any content, in every form and with every terminator, yields no key
// and leaves the key after it to be read.
func FuzzKeyFilter(f *testing.F) {
	f.Add([]byte("1$r0;1m"), uint8(0), uint8(0))
	f.Add([]byte("11;rgb:ffff/ffff/ffff"), uint8(1), uint8(1))
	f.Add([]byte("ry\xc3\xa9\xe2\x82"), uint8(7), uint8(2))
	f.Add([]byte("\x1b[ry\xc2"), uint8(12), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, form, end uint8) {
		if k := filterKeys(string(data)); strings.IndexFunc(k, func(r rune) bool { return r >= 0x80 }) >= 0 {
			t.Fatalf("non-ASCII key from %q: %q", data, k)
		}
		e := stringEnds[int(end)%len(stringEnds)]
		p := payload(data, e)
		if e != "\x1b\\" && e != "\x07" && !utf8.ValidString(p) {
			t.Fatalf("payload %q is not UTF-8", p)
		}
		in := stringForms[int(form)%len(stringForms)] + p + e + "a"
		if got := filterKeys(in); got != "a" {
			t.Fatalf("keys of %q = %q, want \"a\"", in, got)
		}
	})
}

// TestKeysRead checks read on a plain reader: terminal replies before an answer are not
// taken for it.
func TestKeysRead(t *testing.T) {
	var out bytes.Buffer
	k := &keys{r: strings.NewReader("\x1bP>|ry\x1b\\\x1b]11;rgb:0/0/0\x07\x90y\x9c a"), p: &printer{w: &out}}
	c, err := k.read("? ")
	if err != nil || c != 'a' {
		t.Fatalf("read = %q, %v; want 'a'", c, err)
	}
	if out.String() != "? a\n" {
		t.Errorf("screen %q", out.String())
	}
}
