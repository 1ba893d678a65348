package review

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// expectSelect rebuilds the selected content independently of the edits: outside hunks the
// old lines are kept; inside a hunk its context lines plus its delete lines (not chosen) or
// its insert lines (chosen).
func expectSelect(t *testing.T, old string, hs []Hunk, chosen []bool) string {
	t.Helper()
	oldLines := splitKeep(old)
	var b strings.Builder
	next := 0 // 0-based old line not yet written
	for i, h := range hs {
		start := h.OldStart - 1
		for ; next < start; next++ {
			b.WriteString(oldLines[next])
		}
		for _, l := range h.Lines {
			switch {
			case l.Kind == LineContext:
				b.WriteString(l.Text)
				next++
			case l.Kind == LineDelete:
				if !chosen[i] {
					b.WriteString(l.Text)
				}
				next++
			case l.Kind == LineInsert && chosen[i]:
				b.WriteString(l.Text)
			}
		}
	}
	for ; next < len(oldLines); next++ {
		b.WriteString(oldLines[next])
	}
	return b.String()
}

func splitKeep(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

func checkSelect(t *testing.T, old, new string) {
	t.Helper()
	hs, err := Hunks(old, new)
	if err != nil {
		t.Fatal(err)
	}
	if old == new {
		if hs != nil {
			t.Fatalf("equal inputs gave %d hunks", len(hs))
		}
		return
	}
	n := len(hs)
	all := func(v bool) []bool {
		c := make([]bool, n)
		for i := range c {
			c[i] = v
		}
		return c
	}
	if got, err := Select(old, hs, all(true)); err != nil || got != new {
		t.Fatalf("all-yes: got %q, %v; want S's %q", got, err, new)
	}
	if got, err := Select(old, hs, all(false)); err != nil || got != old {
		t.Fatalf("all-no: got %q, %v; want W's %q", got, err, old)
	}
	// Every mixture for small hunk counts, random ones beyond.
	r := rand.New(rand.NewPCG(uint64(len(old)), uint64(len(new))))
	for m := 0; m < 64; m++ {
		c := make([]bool, n)
		for i := range c {
			if n <= 6 {
				c[i] = m&(1<<i) != 0
			} else {
				c[i] = r.IntN(2) == 1
			}
		}
		got, err := Select(old, hs, c)
		if err != nil {
			t.Fatal(err)
		}
		if want := expectSelect(t, old, hs, c); got != want {
			t.Fatalf("selection %v of %q -> %q:\ngot  %q\nwant %q", c, old, new, got, want)
		}
		if n <= 6 && m >= 1<<n-1 {
			break
		}
	}
}

func TestSelectExact(t *testing.T) {
	long := func(prefix string, n int, nl string) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(prefix + strings.Repeat("x", i%5) + nl)
		}
		return b.String()
	}
	base := long("line", 40, "\n")
	lines := splitKeep(base)
	mod := append([]string(nil), lines...)
	mod[2] = "changed 2\n"
	mod[20] = "changed 20\n"
	mod = append(mod[:30], append([]string{"inserted\n"}, mod[30:]...)...)
	mod = append(mod[:35], mod[37:]...)
	modified := strings.Join(mod, "")
	crlf := strings.ReplaceAll(base, "\n", "\r\n")
	crlfMod := strings.ReplaceAll(modified, "\n", "\r\n")

	cases := []struct{ name, old, new string }{
		{"equal", base, base},
		{"several hunks", base, modified},
		{"reverse", modified, base},
		{"from empty", "", "a\nb\n"},
		{"to empty", "a\nb\n", ""},
		{"crlf", crlf, crlfMod},
		{"lf to crlf", base, crlf},
		{"crlf to lf one line", crlf, strings.Replace(crlf, "\r\n", "\n", 1)},
		{"add final newline", "a\nb\nc", "a\nb\nc\n"},
		{"drop final newline", "a\nb\nc\n", "a\nb\nc"},
		{"no final newline both", strings.TrimSuffix(base, "\n"), strings.TrimSuffix(modified, "\n")},
		{"no final newline last line changed", "a\nb\nc", "a\nb\nd"},
		{"crlf no final newline", "a\r\nb\r\nc", "a\r\nB\r\nc"},
		{"only cr", "a\rb\rc", "a\rB\rc"},
		{"binaryish", "a\x00b\nc\n", "a\x00B\nc\n\x00"},
		{"invalid utf8", "\xff\xfe\n\x80\n", "\xff\xfe\n\x81\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { checkSelect(t, c.old, c.new) })
	}
}

func TestHunksShape(t *testing.T) {
	old := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n17\n18\n19\n20\n"
	new := strings.Replace(strings.Replace(old, "2\n", "two\n", 1), "18\n", "eighteen\n", 1)
	hs, err := Hunks(old, new)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 {
		t.Fatalf("got %d hunks, want 2 (changes 16 lines apart)", len(hs))
	}
	if got := hs[0].Header(); got != "@@ -1,5 +1,5 @@" {
		t.Errorf("hunk 0 header %q", got)
	}
	if got := hs[1].Header(); got != "@@ -15,6 +15,6 @@" {
		t.Errorf("hunk 1 header %q", got)
	}
	if len(hs[0].Edits) != 1 || len(hs[1].Edits) != 1 {
		t.Errorf("edits per hunk: %d, %d", len(hs[0].Edits), len(hs[1].Edits))
	}
	got, _ := Select(old, hs, []bool{false, true})
	if want := strings.Replace(old, "18\n", "eighteen\n", 1); got != want {
		t.Errorf("second hunk only: got %q", got)
	}
	if _, err := Select(old, hs, []bool{true}); err == nil {
		t.Error("Select accepted a choice list of the wrong length")
	}
	if hs, _ := Hunks("", "x\n"); len(hs) != 1 || hs[0].Header() != "@@ -0,0 +1,1 @@" {
		t.Errorf("add to empty: %+v", hs)
	}
}

func FuzzSelect(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nB\nc\nd", uint64(1))
	f.Add("a\r\nb\r\n", "a\r\nc\r\nb", uint64(2))
	f.Add("", "x", uint64(3))
	f.Fuzz(func(t *testing.T, old, new string, seed uint64) {
		if len(old) > 4096 || len(new) > 4096 {
			return
		}
		hs, err := Hunks(old, new)
		if err != nil {
			t.Fatal(err)
		}
		c := make([]bool, len(hs))
		all := make([]bool, len(hs))
		for i := range c {
			c[i] = seed>>(i%64)&1 == 1
			all[i] = true
		}
		if got, err := Select(old, hs, all); err != nil || got != new {
			t.Fatalf("all-yes: got %q, %v, want %q", got, err, new)
		}
		got, err := Select(old, hs, c)
		if err != nil {
			t.Fatal(err)
		}
		if want := expectSelect(t, old, hs, c); got != want {
			t.Fatalf("selection %v: got %q want %q", c, got, want)
		}
	})
}
