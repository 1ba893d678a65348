package review

import (
	"strings"
	"testing"

	"brood.dev/brood/frontend/diff"
)

// TestSessionShowsMode: the per-file view and the summary show what the apply does to a
// file's mode beside its content change, in red when it widens access, and a plain
// narrowing in bold.
func TestSessionShowsMode(t *testing.T) {
	f := newFixture(t)
	wide := f.modified("x.txt", "v\n", "vm\n")
	wide.OldMode, wide.NewMode, wide.Risk = 0o640, 0o644, "widens access: readable by others"
	narrow := f.modified("n.txt", "n\n", "n2\n")
	narrow.OldMode, narrow.NewMode = 0o644, 0o600
	suid := f.modified("suid", "a\n", "b\n")
	suid.OldMode, suid.NewMode = 0o4755, 0o755
	// accept x.txt (and confirm the risk), accept n.txt, accept suid, then apply.
	ds, ok, err, screen := run(t, f.trees, []diff.Change{wide, narrow, suid}, "ay"+"a"+"a"+"y")
	if err != nil || !ok || ds[0].Verdict != Accept || ds[1].Verdict != Accept || ds[2].Verdict != Accept {
		t.Fatalf("Run: %v %v %+v\n%s", err, ok, ds, screen)
	}
	for _, want := range []string{
		"  " + sgrBoldRed + "mode 0640 -> 0644: readable by others" + sgrReset + "\n",
		"  " + sgrBold + "mode 0644 -> 0600" + sgrReset + "\n",
		"  " + sgrBold + "mode 4755 -> 0755; setuid dropped" + sgrReset + "\n",
		"x.txt " + sgrBoldRed + "[HIGH RISK]" + sgrReset + " [mode 0640 -> 0644: readable by others]",
		"n.txt [mode 0644 -> 0600]",
		"suid [mode 4755 -> 0755; setuid dropped]",
	} {
		if !strings.Contains(screen, want) {
			t.Errorf("screen lacks %q:\n%s", want, screen)
		}
	}
	if strings.Count(screen, "really accept?") != 1 || !strings.Contains(screen, "HIGH RISK (widens access: readable by others): really accept?") {
		t.Errorf("the widening change was not confirmed once as high risk:\n%s", screen)
	}
	if strings.Contains(screen, "mode 0640 -> 0644\n") {
		t.Errorf("bare mode line printed besides the note:\n%s", screen)
	}
}

// TestSessionShowsNotes: a note for a path (what the apply does to its attributes) is
// shown in the change's view and in the summary.
func TestSessionShowsNotes(t *testing.T) {
	f := newFixture(t)
	c := f.modified("a.txt", "a\n", "b\n")
	note := "metadata: security.capability not kept (file capabilities)"
	var out strings.Builder
	s := &Interactive{Changes: []diff.Change{c}, Trees: f.trees, In: strings.NewReader("a" + "y"), Out: &out,
		Notes: map[string]string{"a.txt": note}}
	if _, ok, err := s.Run(); err != nil || !ok {
		t.Fatalf("Run: %v %v\n%s", ok, err, out.String())
	}
	screen := out.String()
	if !strings.Contains(screen, "  "+note+"\n") || !strings.Contains(screen, "a.txt ["+note+"]") {
		t.Errorf("screen:\n%s", screen)
	}
}
