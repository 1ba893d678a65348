package diff

import (
	"slices"
	"testing"
)

// TestEmptiedDirs: a new directory whose only content is held back is held too (nested
// ones as well); one with applied content, an empty new directory and a directory W
// already had are not.
func TestEmptiedDirs(t *testing.T) {
	cs := []Change{
		{Path: ".vscode", Kind: KindAdded},                            // 0: only a held file below
		{Path: ".vscode/tasks.json", Kind: KindAdded, Risk: "editor"}, // 1: held
		{Path: "a", Kind: KindAdded},                                  // 2: nested held content
		{Path: "a/b", Kind: KindAdded},                                // 3
		{Path: "a/b/.envrc", Kind: KindAdded, Risk: "direnv"},         // 4: held
		{Path: "empty", Kind: KindAdded},                              // 5: the agent's empty directory
		{Path: "mixed", Kind: KindAdded},                              // 6: applied content below
		{Path: "mixed/.envrc", Kind: KindAdded, Risk: "direnv"},       // 7: held
		{Path: "mixed/ok.txt", Kind: KindAdded},                       // 8
		{Path: "old/.envrc", Kind: KindAdded, Risk: "direnv"},         // 9: W had old/
		{Path: "x", Kind: KindAdded},                                  // 10: held file with a name prefix of x-y
		{Path: "x-y", Kind: KindAdded},                                // 11
	}
	applied := func(i int) bool { return cs[i].Risk == "" }
	got := EmptiedDirs(cs, applied)
	if want := []int{0, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("EmptiedDirs = %v, want %v", got, want)
	}
	if got := EmptiedDirs(cs, func(int) bool { return true }); len(got) != 0 {
		t.Errorf("everything applied: EmptiedDirs = %v", got)
	}
}
