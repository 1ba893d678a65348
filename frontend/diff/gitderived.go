package diff

import (
	"slices"
	"strings"

	"brood.dev/brood/frontend/manifest"
)

// gitDerivedFiles are the files of the workspace root's git directory that git derives
// from history or writes as a record of the last operation (gitrepository-layout(5)):
// the index, refs, reflogs, objects and the pseudo-refs. When W's root holds a .git
// directory, package gitreview reviews the agent's history as commits and applies it as
// a branch, so a change to one of these is not a file change to list or to flush (it
// is never written to W). Entries ending in '/' cover everything below; names compare
// exactly, or by foldName on a case-insensitive W. Not listed, so still listed and
// refused or high-risk as before: config, hooks/, the rest of info/ (exclude,
// attributes, grafts, sparse-checkout), shallow, objects/info/alternates, anything
// unknown, and every file of a nested repository.
var gitDerivedFiles = []string{
	"index", "HEAD", "ORIG_HEAD", "FETCH_HEAD", "MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD",
	"REBASE_HEAD", "AUTO_MERGE", "COMMIT_EDITMSG", "MERGE_MSG", "MERGE_MODE", "SQUASH_MSG",
	"packed-refs", "logs/", "refs/", "objects/", // objects/info/packs and commit-graph too
	"info/refs", // git update-server-info's list of refs (git gc writes it)
}

// gitDerived reports whether path is one of gitDerivedFiles below the root ".git"
// (objects/info/alternates and objects/info/http-alternates excepted: they stay
// refused as DefaultProtected); fold compares names by foldName.
func gitDerived(path string, fold bool) bool {
	p := path
	if fold {
		p = foldPath(path)
	}
	rel, ok := strings.CutPrefix(p, ".git/")
	if !ok || strings.HasPrefix(foldPath(rel), "objects/info/") && strings.HasSuffix(foldPath(rel), "alternates") {
		return false
	}
	for _, f := range gitDerivedFiles {
		if fold {
			f = foldPath(f)
		}
		if rel == f || rel+"/" == f || strings.HasSuffix(f, "/") && strings.HasPrefix(rel, f) {
			return true
		}
	}
	return false
}

// rootGitDir reports whether the walk of W (sorted by path) has a directory ".git".
func rootGitDir(wn []node) bool {
	i, ok := slices.BinarySearchFunc(wn, ".git", func(n node, p string) int { return strings.Compare(n.path, p) })
	return ok && wn[i].st.Type == manifest.TypeDir
}
