package review

import (
	"fmt"
	"strings"

	"brood.dev/brood/frontend/diff"
)

// AutoOptions are the non-interactive choices of `brood review`.
type AutoOptions struct {
	All          bool     // accept every change that may be accepted without a prompt
	IncludeRisky bool     // with Paths: high-risk changes below a named directory too (never with All)
	RejectAll    bool     // reject everything (recorded), apply nothing
	Paths        []string // accept these paths (exact, or a directory prefix)
}

// Path match strengths (see match).
const (
	matchNone   = iota
	matchPrefix // the change lies below a named directory
	matchExact  // the change's path was named exactly
)

// Auto decides every change without a prompt. Refused changes are never accepted;
// conflicts are never resolved (they need the interactive review); high-risk changes are
// never accepted by All (IncludeRisky or not), and by Paths only when their path is named
// exactly or IncludeRisky is set (as `brood apply` does: naming the very file is the
// explicit choice; a directory is not). With Paths,
// changes not named are skipped, and a path that names no change is an error wrapping
// ErrUnknownPath. A path matches a change whose path equals it (raw bytes, or as
// EscapeName prints it) or lies below it.
func Auto(changes []diff.Change, o AutoOptions) ([]Decision, error) {
	var named []int
	if !o.All && !o.RejectAll {
		var err error
		if named, err = match(changes, o.Paths); err != nil {
			return nil, err
		}
	}
	ds := make([]Decision, len(changes))
	for i, c := range changes {
		d := Decision{Change: c}
		switch {
		case o.RejectAll:
			d.Verdict, d.Note = Reject, "rejected with --reject-all"
		case !o.All && named[i] == matchNone:
			d.Verdict, d.Note = Skip, "not named"
		case c.Kind == diff.KindRefused:
			d.Verdict, d.Note = Skip, "refused: "+c.Reason
		case c.Kind == diff.KindConflict:
			d.Verdict, d.Note = Skip, "conflict: W changed since the snapshot; resolve it in the interactive review"
		case c.Risk != "" && o.All:
			d.Verdict, d.Note = Skip, "high risk ("+c.Risk+"): --all never accepts it; name its path"
		case c.Risk != "" && !o.IncludeRisky && named[i] != matchExact:
			d.Verdict, d.Note = Skip, "high risk ("+c.Risk+"): name its path exactly or add --include-risky"
		default:
			d.Verdict, d.Note = Accept, "accepted"
			if o.All {
				d.Note = "accepted with --all"
			}
		}
		ds[i] = d
	}
	return ds, nil
}

// Filter returns the changes matching any of paths (see Auto), in order, or an error
// wrapping ErrUnknownPath naming the first path that matches none.
func Filter(changes []diff.Change, paths []string) ([]diff.Change, error) {
	keep, err := match(changes, paths)
	if err != nil {
		return nil, err
	}
	var out []diff.Change
	for i, c := range changes {
		if keep[i] != matchNone {
			out = append(out, c)
		}
	}
	return out, nil
}

// match returns, per change, how strongly any of paths names it (matchNone, matchPrefix,
// matchExact); a path naming no change is an error wrapping ErrUnknownPath.
func match(changes []diff.Change, paths []string) ([]int, error) {
	hit := make([]int, len(changes))
	for _, arg := range paths {
		any := false
		for i, c := range changes {
			if m := matchPath(c.Path, arg); m != matchNone {
				hit[i], any = max(hit[i], m), true
			}
		}
		if !any {
			return nil, fmt.Errorf("select %s: %w", EscapeName(arg), ErrUnknownPath)
		}
	}
	return hit, nil
}

// matchPath says how arg names path: exactly (the raw bytes, or as EscapeName prints
// them, with an optional leading "./"), as a directory above it, or not at all.
func matchPath(path, arg string) int {
	arg = strings.TrimPrefix(arg, "./")
	if path == arg || EscapeName(path) == arg {
		return matchExact
	}
	dir := strings.TrimSuffix(arg, "/")
	if dir == "" || dir == "." || strings.HasPrefix(path, dir+"/") || strings.HasPrefix(EscapeName(path), dir+"/") {
		return matchPrefix
	}
	return matchNone
}
