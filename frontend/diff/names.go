package diff

import (
	"strings"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// foldName returns the key under which a case-insensitive, normalization-insensitive
// volume compares name: code points HFS+ ignores removed (hfsIgnorable), Unicode full
// case folding (golang.org/x/text/cases.Fold, CaseFolding.txt), then NFC. Two names
// with the same key are one file on APFS and HFS+ (macOS's default volumes), on ext4 and
// f2fs casefold directories (utf8 NFD + casefold, fs/unicode), and, for the names git
// and the tools in riskRules read, on vfat, exFAT and NTFS.
//
// Protected names and risk rules are always compared by this key, whatever W's volume
// does: git itself refuses ".GIT" in a tree on every platform (read-cache.c,
// verify_dotfile), a repository moves between volumes, and refusing ".GIT/config" on a
// case-sensitive volume costs nothing. Collisions between two paths use it only when W
// folds case (a case-sensitive W holds "README" and "readme" as two files).
func foldName(name string) string {
	ascii := true
	for i := 0; i < len(name); i++ {
		if name[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		return strings.ToLower(name) // ASCII: already NFC, no ignorable code point
	}
	name = strings.Map(func(r rune) rune {
		if hfsIgnorable(r) {
			return -1
		}
		return r
	}, name)
	return norm.NFC.String(cases.Fold().String(name))
}

// hfsIgnorable reports whether HFS+ drops r when it compares names: the zero-width and
// directional formatting code points U+200C–U+200F, U+202A–U+202E, U+206A–U+206F and
// U+FEFF (Apple TN1150, "Unicode Subtleties"; git's utf8.c next_hfs_char lists the same
// set, so ".g\u200cit" is ".git" to it).
func hfsIgnorable(r rune) bool {
	switch {
	case r >= 0x200c && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x206a && r <= 0x206f, r == 0xfeff:
		return true
	}
	return false
}

// foldPath returns foldName of every component of the slash-separated path p.
func foldPath(p string) string {
	comps := strings.Split(p, "/")
	for i, c := range comps {
		comps[i] = foldName(c)
	}
	return strings.Join(comps, "/")
}

// isDotGit reports whether the path component c names a git directory on some volume
// (".git", ".GIT", ".Git", ".g\u200cit", ...).
func isDotGit(c string) bool { return len(c) >= 4 && foldName(c) == ".git" }
