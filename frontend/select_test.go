package frontend

import (
	"strings"
	"testing"

	"brood.dev/brood/frontend/diff"
)

func TestSelectForApply(t *testing.T) {
	cs := []diff.Change{
		{Path: "a", Kind: diff.KindModified},
		{Path: "d/x", Kind: diff.KindAdded},
		{Path: "d/hook", Kind: diff.KindAdded, Risk: "git hook manager"},
		{Path: "d/bad", Kind: diff.KindRefused, Reason: "FIFO"},
		{Path: "c", Kind: diff.KindConflict},
		{Path: "e\x1b", Kind: diff.KindAdded},
	}
	names := func(cs []diff.Change) string {
		var s []string
		for _, c := range cs {
			s = append(s, c.Path)
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		all, risky         bool
		paths              []string
		apply, block, skip string
	}{
		{true, false, nil, "a,d/x,e\x1b", "d/bad,c", "d/hook"},
		{true, true, nil, "a,d/x,e\x1b", "d/bad,c", "d/hook"}, // --all never takes a risky change
		{false, true, []string{"d"}, "d/x,d/hook", "d/bad", ""},
		{false, false, []string{"d"}, "d/x", "d/bad", "d/hook"},
		{false, false, []string{"./d/", "d/hook"}, "d/x,d/hook", "d/bad", ""},
		{false, false, []string{"d/bad", "c"}, "", "d/bad,c", ""},
		{false, false, []string{diff.Escape("e\x1b")}, "e\x1b", "", ""},
	} {
		sel, err := SelectForApply(cs, tc.all, tc.risky, tc.paths)
		if err != nil {
			t.Fatal(err)
		}
		if names(sel.Apply) != tc.apply || names(sel.Blocked) != tc.block || names(sel.Risky) != tc.skip {
			t.Errorf("%+v: apply %q blocked %q risky %q", tc, names(sel.Apply), names(sel.Blocked), names(sel.Risky))
		}
	}
	if _, err := SelectForApply(cs, false, false, []string{"zz"}); err == nil {
		t.Error("a PATH naming no change was accepted")
	}
}

// TestSelectForApplyEmptied: with PATH, a named new directory whose content is held
// (a directory name does not take a risky file without --include-risky) is held too.
func TestSelectForApplyEmptied(t *testing.T) {
	cs := []diff.Change{
		{Path: ".vscode", Kind: diff.KindAdded},
		{Path: ".vscode/tasks.json", Kind: diff.KindAdded, Risk: "editor task"},
	}
	sel, err := SelectForApply(cs, false, false, []string{".vscode"})
	if err != nil || len(sel.Apply) != 0 || len(sel.Emptied) != 1 || len(sel.Risky) != 1 {
		t.Errorf(".vscode: %+v %v", sel, err)
	}
	sel, err = SelectForApply(cs, false, true, []string{".vscode"})
	if err != nil || len(sel.Apply) != 2 || len(sel.Emptied) != 0 {
		t.Errorf(".vscode --include-risky: %+v %v", sel, err)
	}
}
