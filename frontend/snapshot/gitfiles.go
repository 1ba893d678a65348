package snapshot

import (
	"strings"

	"brood.dev/brood/frontend/gitconfig"
)

// gitFileKind is how Take sanitizes a file inside a git directory.
type gitFileKind int

const (
	notGitFile   gitFileKind = iota
	configFile               // git config syntax: gitconfig.Sanitize
	remotesFile              // gitconfig.SanitizeLines(gitconfig.Remotes, ...)
	branchesFile             // gitconfig.SanitizeLines(gitconfig.Branches, ...)
	recordFile               // gitconfig.SanitizeLines(gitconfig.Record, ...)
)

// lineKind returns the gitconfig.LineKind of a line-file kind.
func (k gitFileKind) lineKind() gitconfig.LineKind {
	switch k {
	case remotesFile:
		return gitconfig.Remotes
	case branchesFile:
		return gitconfig.Branches
	}
	return gitconfig.Record
}

// gitDirFile is one row of gitDirFiles: a file inside a git directory named by its last
// path components ("*" matches any one name; a final "**" matches one or more names
// below the row's other components, found anywhere below ".git"), and how Take
// sanitizes it.
type gitDirFile struct {
	match []string
	kind  gitFileKind
}

// gitDirFiles are the files inside a git directory that hold a remote URL git uses or
// records (gitrepository-layout(5)), matched below every ".git" component at any depth,
// so .git/modules/<name>/ and .git/worktrees/<name>/ too. config and config.worktree are
// matched by isGitConfig (which skips refs and data of those names), svn/.metadata
// anywhere (no ref can be named so: git-check-ref-format(1) forbids a component starting
// with '.'); the line rows only strip credentials and never change a file without them
// (a ref named "remotes/x" is a SHA-1 line and stays as it is), so they match wherever
// the names appear.
//
// Checked and holding no URL: HEAD, ORIG_HEAD, MERGE_HEAD and the other pseudo-refs
// (object names or "ref: <ref>"), refs/ and packed-refs (object names), index, shallow,
// description, info/exclude, info/refs and info/packs (names of refs and packs),
// objects/info/alternates (local paths), hooks/ (scripts, refused as changes; not URLs
// git uses), lfs/ (git-lfs keeps objects and temporary files there; its URLs live in
// config and .lfsconfig). Not sanitizable: commit and tag messages in objects/ ("Merge
// branch 'x' of <url>"), whose bytes are their names.
var gitDirFiles = []gitDirFile{
	// First, so that a branch named "remotes/x" has its reflog read as a reflog.
	{[]string{"logs", "**"}, recordFile},                         // reflogs: "clone: from <url>", "pull <url>: Fast-forward" (git-reflog(1))
	{[]string{"svn", ".metadata"}, configFile},                   // git-svn: config syntax, svn-remote.<name>.reposRoot is a URL (git-svn(1))
	{[]string{"remotes", "*"}, remotesFile},                      // legacy remote: "URL: <url>" lines git fetches from and pushes to
	{[]string{"branches", "*"}, branchesFile},                    // legacy remote: "<url>#<branch>" git fetches from
	{[]string{"FETCH_HEAD"}, recordFile},                         // "<sha>\t[not-for-merge]\t<what> of <url>" per fetched ref (git-fetch(1))
	{[]string{"objects", "info", "http-alternates"}, recordFile}, // URLs of object stores served along over dumb HTTP
	{[]string{"MERGE_MSG"}, recordFile},                          // "Merge branch 'x' of <url>" from FETCH_HEAD, during a merge (git-merge(1))
	{[]string{"SQUASH_MSG"}, recordFile},                         // the message of a merge --squash, likewise
	{[]string{"COMMIT_EDITMSG"}, recordFile},                     // the last commit's message, a merge's "... of <url>" too
}

// gitFileOf returns how Take sanitizes rel (a '/'-separated path): configFile for
// isGitConfig's files, else the kind of the first gitDirFiles row naming it below its
// last ".git" component, else notGitFile. Names compare ignoring case (strings.ToLower), as on a
// case-insensitive W git finds .GIT/REMOTES/old for .git/remotes/old.
func gitFileOf(rel string) gitFileKind {
	lower := strings.ToLower(rel)
	if !strings.Contains(lower, ".git/") { // the common case: no git directory
		return notGitFile
	}
	if isGitConfig(lower) {
		return configFile
	}
	parts := strings.Split(lower, "/")
	git := -1
	for i, p := range parts[:len(parts)-1] {
		if p == ".git" {
			git = i
		}
	}
	if git < 0 {
		return notGitFile
	}
	in := parts[git+1:]
	for _, f := range gitDirFiles {
		if matchGitDirFile(f.match, in) {
			return f.kind
		}
	}
	return notGitFile
}

// matchGitDirFile reports whether rel (the lower-case components below a ".git") is
// named by m, compared lower-case: m's components match rel's last ones, or, for m
// ending in "**", m's others match consecutive components of rel, not right after a
// "modules" component, followed by at least one more.
func matchGitDirFile(m, rel []string) bool {
	eq := func(m, rel []string) bool {
		for i := range m {
			if m[i] != "*" && strings.ToLower(m[i]) != rel[i] {
				return false
			}
		}
		return true
	}
	if m[len(m)-1] == "**" {
		m = m[:len(m)-1]
		for i := 0; i+len(m) < len(rel); i++ {
			// After "modules/" the name is a submodule's ("logs"), not its reflogs.
			if eq(m, rel[i:]) && (i == 0 || rel[i-1] != "modules") {
				return true
			}
		}
		return false
	}
	return len(rel) >= len(m) && eq(m, rel[len(rel)-len(m):])
}
