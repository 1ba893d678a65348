package review

import (
	"fmt"
	"strings"

	"brood.dev/brood/frontend/diff"
)

// AutoOptions are the non-interactive choices of `brood review`.
type AutoOptions struct {
	All          bool     // accept every change that may be accepted without a prompt
	IncludeRisky bool     // with All or Paths: high-risk changes too
	RejectAll    bool     // reject everything (recorded), apply nothing
	Paths        []string // accept these paths (exact, or a directory prefix)
}

// Auto decides every change without a prompt. Refused changes are never accepted;
// conflicts are never resolved (they need the interactive review); high-risk changes are
// accepted only with IncludeRisky. With Paths, changes not named are skipped, and a path
// that names no change is an error wrapping ErrUnknownPath. A path matches a change whose
// path equals it (raw bytes, or as EscapeName prints it) or lies below it.
func Auto(changes []diff.Change, o AutoOptions) ([]Decision, error) {
	var named []bool
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
		case !o.All && !named[i]:
			d.Verdict, d.Note = Skip, "not named"
		case c.Kind == diff.KindRefused:
			d.Verdict, d.Note = Skip, "refused: "+c.Reason
		case c.Kind == diff.KindConflict:
			d.Verdict, d.Note = Skip, "conflict: W changed since the snapshot; resolve it in the interactive review"
		case c.Risk != "" && !o.IncludeRisky:
			d.Verdict, d.Note = Skip, "high risk ("+c.Risk+"): needs --include-risky"
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
		if keep[i] {
			out = append(out, c)
		}
	}
	return out, nil
}

// match marks the changes any of paths names; a path naming none is an error.
func match(changes []diff.Change, paths []string) ([]bool, error) {
	hit := make([]bool, len(changes))
	for _, arg := range paths {
		any := false
		for i, c := range changes {
			if matchPath(c.Path, arg) {
				hit[i], any = true, true
			}
		}
		if !any {
			return nil, fmt.Errorf("select %s: %w", EscapeName(arg), ErrUnknownPath)
		}
	}
	return hit, nil
}

func matchPath(path, arg string) bool {
	arg = strings.TrimPrefix(arg, "./")
	if arg == "" || arg == "." {
		return true
	}
	for _, a := range []string{arg, strings.TrimSuffix(arg, "/")} {
		if path == a || strings.HasPrefix(path, a+"/") || EscapeName(path) == a {
			return true
		}
	}
	return false
}
