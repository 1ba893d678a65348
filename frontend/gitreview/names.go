package gitreview

import (
	"path"
	"strings"

	"brood.dev/brood/frontend/diff"
)

// refNameProblem says why name is not a ref brood reviews ("" when it is one): the rules
// of git-check-ref-format(1) (no "..", no component starting with '.' or ending in
// ".lock", no control bytes, space, '~', '^', ':', '?', '*', '[', '\\' or "@{", no
// empty component, no trailing '.' or '/'), and it must be HEAD or below refs/heads/ or
// refs/tags/. Reasons show the name escaped (diff.Escape).
func refNameProblem(name string) string {
	if name == "HEAD" {
		return ""
	}
	bad := func(why string) string { return "ref " + diff.Escape(name) + ": " + why }
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c == 0x7f {
			return bad("control byte in the name")
		}
	}
	switch {
	case strings.Contains(name, ".."):
		return bad(`".." in the name`)
	case strings.ContainsAny(name, " ~^:?*[\\"), strings.Contains(name, "@{"):
		return bad("character git forbids in a ref name")
	case strings.HasSuffix(name, ".") || strings.HasSuffix(name, "/"):
		return bad("ends in '.' or '/'")
	}
	for _, c := range strings.Split(name, "/") {
		if c == "" || strings.HasPrefix(c, ".") || strings.HasSuffix(c, ".lock") {
			return bad("empty component, or one starting with '.' or ending in .lock")
		}
	}
	if !strings.HasPrefix(name, "refs/heads/") && !strings.HasPrefix(name, "refs/tags/") {
		return bad("only branches, tags and HEAD are reviewed")
	}
	return ""
}

// entryNameProblem says why git would refuse to check out a tree entry name ("" when
// it would not): empty, ".", "..", containing '/' or NUL, a control byte, or a name
// that is ".git" on some filesystem (ignoring case, trailing dots and spaces as NTFS
// does, and its 8.3 short name "git~1"). p is the entry's path for the reason.
func entryNameProblem(name, p string) string {
	bad := func(why string) string { return "tree entry " + diff.Escape(p) + ": " + why }
	switch {
	case name == "" || name == "." || name == "..":
		return bad("empty, \".\" or \"..\" name")
	case strings.ContainsAny(name, "/\x00"):
		return bad("'/' or NUL in a name")
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c == 0x7f {
			return bad("control byte in the name")
		}
	}
	trimmed := strings.ToLower(strings.TrimRight(name, ". "))
	if trimmed == ".git" || trimmed == "git~1" {
		return bad("names a .git directory")
	}
	return ""
}

// linkTargetProblem says why a symlink at p (a path in the tree) with target t is
// refused ("" when it is not): an absolute target, one that climbs out of the tree,
// or one that resolves lexically into a .git directory (diff.LinkIntoGitDir).
func linkTargetProblem(p, t string) string {
	bad := func(why string) string { return "symlink " + diff.Escape(p) + ": " + why }
	switch {
	case t == "" || strings.ContainsRune(t, 0):
		return bad("empty target or NUL in the target")
	case strings.HasPrefix(t, "/"):
		return bad("absolute target")
	}
	if j := path.Clean(path.Join(path.Dir(p), t)); j == ".." || strings.HasPrefix(j, "../") {
		return bad("target climbs out of the repository")
	}
	if diff.LinkIntoGitDir(p, t) {
		return bad("target is inside a .git directory")
	}
	return ""
}
