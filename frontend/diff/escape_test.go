package diff

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain/path.go", "plain/path.go"},
		{"two\nlines", `two\nlines`},
		{"cr\rover", `cr\rover`},
		{"tab\tname", `tab\tname`},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"del\x7f", `del\x7f`},
		{`back\slash`, `back\\slash`},
		{"bad\xff", `bad\xff`},
		{"csi8\x9b", `csi8\x9b`},
		{"c1\u009b2J", `c1\u009b2J`},
		{"rlo\u202egnp.exe", `rlo\u202egnp.exe`},
		{"zw\u200bj", `zw\u200bj`},
		{"ls\u2028ps", `ls\u2028ps`},
		{"héllo wörld ✓", "héllo wörld ✓"},
		{"日本語", "日本語"},
	} {
		if got := Escape(tc.in); got != tc.want {
			t.Errorf("Escape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCheckPath(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"a/b.txt", nil},
		{"héllo/wörld", nil},
		{"latin1-\xe9", nil},
		{`back\slash`, nil},
		{"", ErrEmptyPath},
		{"/etc/passwd", ErrEscapesRoot},
		{"../x", ErrEscapesRoot},
		{"a/../../x", ErrEscapesRoot},
		{"a/./b", ErrEscapesRoot},
		{"a//b", ErrEscapesRoot},
		{"a/", ErrEscapesRoot},
		{".", ErrEscapesRoot},
		{"nul\x00", ErrNUL},
		{"new\nline", ErrControlByte},
		{"esc\x1b", ErrControlByte},
		{"tab\t", ErrControlByte},
		{"raw-c1-\x9b", ErrControlByte},
		{"rlo\u202e", ErrControlByte},
		{"del\x7f", ErrControlByte},
	} {
		err := CheckPath(tc.in)
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("CheckPath(%q) = %v, want %v", tc.in, err, tc.want)
		}
		if err != nil && strings.ContainsAny(err.Error(), "\n\r\x1b\t") {
			t.Errorf("CheckPath(%q) error carries raw control bytes: %q", tc.in, err)
		}
	}
}

// unescape inverts Escape with strconv.Unquote (Escape emits Go escapes; a literal '"'
// needs escaping only for Unquote's sake).
func unescape(s string) (string, error) {
	return strconv.Unquote(`"` + strings.ReplaceAll(s, `"`, `\"`) + `"`)
}

// FuzzName checks the name validator and the terminal rendering on arbitrary bytes:
// Escape never emits a control byte or a character it would itself escape, is
// reversible (so two names never render alike), and CheckPath accepts only names that
// are relative, stay below the root and need no escaping beyond backslashes.
func FuzzName(f *testing.F) {
	for _, s := range []string{"a/b", "two\nlines", "\x1b[2J", "../x", "/abs", "a//b", "\xff\xfe", "\u202e", `\x41`, "ok.txt", "\xc2\x9b", "a/./b", ".."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		e := Escape(name)
		for i := 0; i < len(e); i++ {
			if c := e[i]; c < 0x20 || c == 0x7f {
				t.Fatalf("Escape(%q) = %q holds control byte %#x", name, e, c)
			}
		}
		if !utf8.ValidString(e) {
			t.Fatalf("Escape(%q) = %q is not valid UTF-8", name, e)
		}
		if unsafeName(strings.ReplaceAll(e, `\`, "")) {
			t.Fatalf("Escape(%q) = %q still holds an unsafe character", name, e)
		}
		back, err := unescape(e)
		if err != nil || back != name {
			t.Fatalf("Escape(%q) = %q does not reverse: %q, %v", name, e, back, err)
		}
		err = CheckPath(name)
		if err != nil {
			if !errors.Is(err, ErrEmptyPath) && !errors.Is(err, ErrNUL) && !errors.Is(err, ErrEscapesRoot) && !errors.Is(err, ErrControlByte) {
				t.Fatalf("CheckPath(%q) = %v: not a sentinel", name, err)
			}
			return
		}
		if name == "" || name[0] == '/' || strings.IndexByte(name, 0) >= 0 {
			t.Fatalf("CheckPath(%q) accepted an absolute/empty/NUL path", name)
		}
		for _, c := range strings.Split(name, "/") {
			if c == "" || c == "." || c == ".." {
				t.Fatalf("CheckPath(%q) accepted component %q", name, c)
			}
		}
		if e != name && strings.ReplaceAll(name, `\`, `\\`) != e && utf8.ValidString(name) {
			t.Fatalf("CheckPath(%q) accepted a name Escape changes: %q", name, e)
		}
	})
}
