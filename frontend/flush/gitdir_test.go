package flush

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"brood.dev/brood/frontend/diff"
)

// TestGitDirNeverWritten: flush refuses git's configuration, pointer files, hooks,
// legacy remotes (remotes/, branches/, in any case spelling) and symlinks into .git
// even when a caller hands them over with an applicable kind, and never creates a
// refused directory (evil/.git) as the parent of an applied child, nor writes through a
// W symlink into .git.
func TestGitDirNeverWritten(t *testing.T) {
	// Legacy remotes W holds, in any case spelling, which S points elsewhere.
	legacy := []string{".git/remotes/old", ".git/branches/old", ".git/modules/s/remotes/o", ".git/REMOTES/x",
		".git/Branches/y", "v/.Git/remotes/z"}
	files := map[string]string{".git/HEAD": "ref\n", ".git/hooks/x.sample": "x", "hk": "@.git/hooks", "a.txt": "a"}
	for _, p := range legacy {
		files[p] = "URL: https://gitlab.example.test/r.git\n"
	}
	f := newFixture(t, files)
	put(t, f.S, ".git/config.worktree", "[core]\n\tfsmonitor = touch /tmp/PWNED\n", 0o644)
	put(t, f.S, ".git/worktrees/wt/config.worktree", "[core]\n", 0o644)
	put(t, f.S, "evil/.git/HEAD", "ref\n", 0o644)
	put(t, f.S, "m/.git", "gitdir: /tmp\n", 0o644)
	for _, p := range legacy {
		put(t, f.S, p, "URL: https://evil.example.test/r.git\n", 0o644)
	}
	if err := os.Symlink(".git/hooks", filepath.Join(f.S, "myhooks")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a/../.git", filepath.Join(f.S, "gitlink")); err != nil {
		t.Fatal(err)
	}
	// S replaced its copy of the link by a directory; W still holds the link.
	os.Remove(filepath.Join(f.S, "hk"))
	put(t, f.S, "hk/pre-commit", "#!/bin/sh\n", 0o755)
	before := treeState(t, f.W)
	cases := []struct {
		c    diff.Change
		want error
	}{
		{f.change(diff.KindAdded, ".git/config.worktree"), ErrRefused},
		{f.change(diff.KindAdded, ".git/worktrees/wt/config.worktree"), ErrRefused},
		{f.change(diff.KindAdded, "evil/.git/HEAD"), ErrRefused},
		{f.change(diff.KindAdded, "m/.git"), ErrRefused},
		{f.change(diff.KindSymlink, "myhooks"), ErrSymlinkTarget},
		{f.change(diff.KindSymlink, "gitlink"), ErrSymlinkTarget},
		{f.change(diff.KindAdded, "hk/pre-commit"), nil}, // any error: never written
	}
	for _, p := range legacy {
		cases = append(cases, struct {
			c    diff.Change
			want error
		}{f.change(diff.KindModified, p), ErrRefused})
	}
	for _, tc := range cases {
		_, err := Apply(ctx, f.sess, f.m, items(tc.c), Options{})
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("apply %s: %v, want %v", tc.c.Path, err, tc.want)
		}
	}
	sameTree(t, before, treeState(t, f.W))
}

// TestBelowSkippedNeverWritten: flush never writes below a directory the snapshot did
// not copy (an unreadable directory of the developer's), even when S holds one there.
func TestBelowSkippedNeverWritten(t *testing.T) {
	f := newFixture(t, map[string]string{"locked/x": "mine", "a.txt": "a"})
	for i := range f.m.Entries {
		if f.m.Entries[i].Path == "locked" {
			f.m.Entries[i].Skipped = "unreadable: permission denied"
		}
	}
	put(t, f.S, "locked/new", "agent", 0o644)
	before := treeState(t, f.W)
	if _, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindAdded, "locked/new")), Options{}); !errors.Is(err, ErrRefused) {
		t.Errorf("apply locked/new: %v, want ErrRefused", err)
	}
	sameTree(t, before, treeState(t, f.W))
}
