package diff

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWidenedEveryBit: each group/others bit (accessBits) added to W's mode is named, for
// a content change and a mode change; bits W already had, owner bits and narrowing are
// not; an added entry is flagged only when others may write it.
func TestWidenedEveryBit(t *testing.T) {
	for _, b := range accessBits {
		for _, k := range []Kind{KindModified, KindMode} {
			c := Change{Kind: k, OldMode: 0o600, NewMode: 0o600 | b.bit}
			want := b.verb + " by " + b.who
			if got := Widened(c); got != want {
				t.Errorf("%s 0600 -> %04o: Widened = %q, want %q", k, c.NewMode, got, want)
			}
			if n := ModeNote(c); !strings.HasPrefix(n, "mode 0600 -> ") || !strings.Contains(n, want) {
				t.Errorf("%s 0600 -> %04o: ModeNote = %q", k, c.NewMode, n)
			}
			had := Change{Kind: k, OldMode: 0o600 | b.bit, NewMode: 0o600 | b.bit}
			if got := Widened(had); got != "" {
				t.Errorf("%s bit W had: Widened = %q", k, got)
			}
		}
	}
	for _, c := range []struct {
		c    Change
		want string
	}{
		{Change{Kind: KindModified, OldMode: 0o640, NewMode: 0o644}, "readable by others"},
		{Change{Kind: KindModified, OldMode: 0o600, NewMode: 0o666}, "readable by group and others, writable by group and others"},
		{Change{Kind: KindMode, OldMode: 0o700, NewMode: 0o755}, "readable by group and others, executable by group and others"},
		{Change{Kind: KindModified, OldMode: 0o644, NewMode: 0o600}, ""},                             // narrowing
		{Change{Kind: KindModified, OldMode: 0o444, NewMode: 0o644}, ""},                             // owner bit only
		{Change{Kind: KindAdded, NewMode: 0o644}, ""},                                                // nothing in W to widen
		{Change{Kind: KindAdded, NewMode: 0o666}, "writable by others"},                              // anyone may change it
		{Change{Kind: KindConflict, OldMode: 0o600, NewMode: 0o644}, "readable by group and others"}, // taking S's file in review
		{Change{Kind: KindConflict, OldMode: 0o600}, ""},                                             // S deleted it
		{Change{Kind: KindRefused, OldMode: 0o600, NewMode: 0o644}, ""},                              // never applied
		{Change{Kind: KindSymlink, OldMode: 0o644, NewMode: 0o777}, ""},                              // links have no mode
		{Change{Kind: KindType, OldMode: 0o600, NewMode: 0o755}, ""},                                 // a new entry replaces W's
		{Change{Kind: KindModified, OldMode: 0o640, NewMode: 0o4644}, "readable by others"},
	} {
		if got := Widened(c.c); got != c.want {
			t.Errorf("Widened(%+v) = %q, want %q", c.c, got, c.want)
		}
	}
}

// TestModeNoteSpecialBits: every bit above 0777 (specialBits) is reported as dropped when
// W's entry had it and the apply rewrites the entry, and as not applied when only S has it.
func TestModeNoteSpecialBits(t *testing.T) {
	for _, b := range specialBits {
		drop := Change{Kind: KindModified, OldMode: 0o755 | b.bit, NewMode: 0o755 | b.bit}
		if n := ModeNote(drop); !strings.Contains(n, b.name+" dropped") || !strings.Contains(n, fmt.Sprintf("mode %04o -> 0755", drop.OldMode)) {
			t.Errorf("W %04o modified: ModeNote = %q, want %s dropped", drop.OldMode, n, b.name)
		}
		for _, k := range []Kind{KindMode, KindAdded, KindType} {
			c := Change{Kind: k, OldMode: 0o755, NewMode: 0o755 | b.bit}
			if k == KindAdded {
				c.OldMode = 0
			}
			if n := ModeNote(c); !strings.Contains(n, b.name+" in the snapshot not applied") {
				t.Errorf("%s S %04o: ModeNote = %q, want %s not applied", k, c.NewMode, n, b.name)
			}
		}
	}
	if n := ModeNote(Change{Kind: KindModified, OldMode: 0o644, NewMode: 0o644}); n != "" {
		t.Errorf("unchanged mode: ModeNote = %q", n)
	}
	if n := ModeNote(Change{Kind: KindMode, OldMode: 0o644, NewMode: 0o600}); n != "mode 0644 -> 0600" {
		t.Errorf("narrowing: ModeNote = %q", n)
	}
}

// TestComputeModeWidenedIsRisky: an agent that deletes a 0640 file and writes it again
// under umask 022 (0644) makes a high-risk content change naming the widening; narrowing
// is not risky.
func TestComputeModeWidenedIsRisky(t *testing.T) {
	w, s, _ := setup(t, map[string]string{"x.txt": "v\n", "n.txt": "n\n", "c.txt": "c\n"}, true)
	must(t, os.Chmod(filepath.Join(w, "x.txt"), 0o640))
	must(t, os.Chmod(filepath.Join(w, "c.txt"), 0o600))
	m := testSnapshot(t, w, s, true)
	must(t, os.Remove(filepath.Join(s, "x.txt")))
	must(t, os.WriteFile(filepath.Join(s, "x.txt"), []byte("vm\n"), 0o644))
	must(t, os.Chmod(filepath.Join(s, "x.txt"), 0o644)) // whatever the test's umask
	must(t, os.WriteFile(filepath.Join(s, "n.txt"), []byte("n2\n"), 0o644))
	must(t, os.Chmod(filepath.Join(s, "n.txt"), 0o600))
	// c.txt: both sides edit; taking S's version in the review would widen it.
	must(t, os.WriteFile(filepath.Join(s, "c.txt"), []byte("agent\n"), 0o644))
	must(t, os.Chmod(filepath.Join(s, "c.txt"), 0o644))
	must(t, os.WriteFile(filepath.Join(w, "c.txt"), []byte("developer\n"), 0o600))
	cs, err := Compute(context.Background(), w, s, m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := byPath(cs)
	x := got["x.txt"]
	if x.Kind != KindModified || x.Risk != "widens access: readable by others" ||
		ModeNote(x) != "mode 0640 -> 0644: readable by others" {
		t.Errorf("x.txt = %+v (note %q)", x, ModeNote(x))
	}
	if c := got["c.txt"]; c.Kind != KindConflict || c.Risk != "widens access: readable by group and others" {
		t.Errorf("c.txt = %+v", c)
	}
	n := got["n.txt"]
	if n.Kind != KindModified || n.Risk != "" || ModeNote(n) != "mode 0644 -> 0600" {
		t.Errorf("n.txt = %+v (note %q)", n, ModeNote(n))
	}
}
