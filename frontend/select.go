package frontend

import (
	"fmt"
	"slices"
	"strings"

	"brood.dev/brood/frontend/diff"
)

// ApplySelection splits the changes an apply was asked for.
type ApplySelection struct {
	Apply   []diff.Change // to apply
	Blocked []diff.Change // refused or conflict: never applied
	Risky   []diff.Change // high risk, left out: never by All; Paths need an exact name or IncludeRisky
	Emptied []diff.Change // new directories holding only changes left out (diff.EmptiedDirs)
}

// Left counts the changes selected but left out (blocked, risky, emptied).
func (s ApplySelection) Left() int { return len(s.Blocked) + len(s.Risky) + len(s.Emptied) }

// SelectForApply chooses the changes to apply: every change (all), or those the
// workspace-relative paths name (an exact path, raw or as diff.Escape prints it, or a
// directory covering the changes below it). all never selects a high-risk change; a path
// selects one when it names it exactly, or below a named directory with includeRisky. A
// new directory whose content is all left out is left out too. A path that covers no
// change is an error naming it.
func SelectForApply(changes []diff.Change, all, includeRisky bool, paths []string) (ApplySelection, error) {
	var sel ApplySelection
	add := func(c diff.Change, exact bool) {
		switch {
		case c.Kind == diff.KindRefused || c.Kind == diff.KindConflict:
			sel.Blocked = append(sel.Blocked, c)
		case c.Risk != "" && (all || !includeRisky && !exact):
			sel.Risky = append(sel.Risky, c)
		default:
			sel.Apply = append(sel.Apply, c)
		}
	}
	if all {
		for _, c := range changes {
			add(c, false)
		}
		return holdEmptied(sel), nil
	}
	hit := make([]int, len(changes)) // 0 not named, 1 below a named directory, 2 named exactly
	for _, arg := range paths {
		a := strings.TrimSuffix(strings.TrimPrefix(arg, "./"), "/")
		found := false
		for i, c := range changes {
			switch {
			case c.Path == a || diff.Escape(c.Path) == a:
				hit[i], found = 2, true
			case a == "" || a == "." || strings.HasPrefix(c.Path, a+"/"):
				hit[i] = max(hit[i], 1)
				found = true
			}
		}
		if !found {
			return sel, fmt.Errorf("no change at or below %s", diff.Escape(arg))
		}
	}
	for i, c := range changes {
		if hit[i] > 0 {
			add(c, hit[i] == 2)
		}
	}
	return holdEmptied(sel), nil
}

// holdEmptied moves the new directories that would be created only to stay empty, all
// their content being left out (diff.EmptiedDirs), from sel.Apply to sel.Emptied.
func holdEmptied(sel ApplySelection) ApplySelection {
	all := slices.Concat(sel.Apply, sel.Blocked, sel.Risky)
	slices.SortFunc(all, func(a, b diff.Change) int { return strings.Compare(a.Path, b.Path) })
	chosen := map[string]bool{}
	for _, c := range sel.Apply {
		chosen[c.Path] = true
	}
	drop := map[string]bool{}
	for _, i := range diff.EmptiedDirs(all, func(i int) bool { return chosen[all[i].Path] }) {
		drop[all[i].Path] = true
	}
	if len(drop) == 0 {
		return sel
	}
	var keep []diff.Change
	for _, c := range sel.Apply {
		if drop[c.Path] {
			sel.Emptied = append(sel.Emptied, c)
		} else {
			keep = append(keep, c)
		}
	}
	sel.Apply = keep
	return sel
}
