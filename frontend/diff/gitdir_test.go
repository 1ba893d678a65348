package diff

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGitReadFilesRefused: every file git reads as configuration, as a remote (legacy
// remotes/ and branches/ files) or as a pointer to another git directory is refused
// wherever a git directory is (.git, nested repositories, submodules under
// .git/modules, worktrees, bare repositories), and so is a .git file (gitdir: pointer),
// whether S adds or changes them.
func TestGitReadFilesRefused(t *testing.T) {
	w, s, _ := setup(t, nil, true)
	writeFiles(t, w, map[string]string{
		".git/HEAD":                   "ref: refs/heads/main\n",
		".git/config":                 "[core]\n",
		".git/worktrees/wt/gitdir":    "/tmp/wt/.git\n",
		".git/worktrees/wt/commondir": "../..\n",
		".git/modules/sub/HEAD":       "ref: refs/heads/main\n",
		".git/modules/sub/config":     "[core]\n",
		"nested/.git/HEAD":            "ref: refs/heads/main\n",
		"bare.git/HEAD":               "ref: refs/heads/main\n",
		"bare.git/refs/heads/main":    "0000\n",
		"sub/.git":                    "gitdir: ../.git/modules/sub\n",
		"src/hooks/useThing.ts":       "x\n",
		"deploy/config":               "a=1\n",
		"cfg/Config":                  "a=1\n",
		"docs/HEAD":                   "just a file\n",
		".git/refs/heads/main":        "0000\n",
		".git/objects/info/packs":     "\n",
		".git/remotes/old":            "URL: https://gitlab.example.test/r.git\n",
		".git/branches/old":           "https://gitlab.example.test/r.git\n",
		".git/refs/remotes/up/main":   "0000\n",
		"mirror/branches/up":          "https://gitlab.example.test/r.git\n",
	})
	m := testSnapshot(t, w, s, true)
	writeFiles(t, s, map[string]string{
		".git/config.worktree":                 "[core]\n\tfsmonitor = touch /tmp/PWNED\n",
		".git/worktrees/wt/config.worktree":    "[core]\n\tfsmonitor = touch /tmp/PWNED\n",
		".git/worktrees/wt/gitdir":             "/tmp/evil/.git\n",
		".git/worktrees/wt/commondir":          "/tmp/evil\n",
		".git/commondir":                       "/tmp/evil\n",
		".git/objects/info/alternates":         "/tmp/evil/objects\n",
		".git/objects/info/http-alternates":    "http://127.0.0.1/x\n",
		".git/info/attributes":                 "* filter=x\n",
		".git/modules/sub/config":              "[core]\n\thooksPath = /tmp\n",
		".git/modules/sub/config.worktree":     "[core]\n",
		".git/modules/sub/hooks/post-checkout": "#!/bin/sh\n",
		"nested/.git/config.worktree":          "[core]\n",
		"nested/.git/objects/info/alternates":  "/tmp\n",
		"sub/.git":                             "gitdir: /tmp/evil\n",
		"other/.git":                           "gitdir: /tmp/evil\n",
		"bare.git/config":                      "[core]\n\tfsmonitor = x\n",
		"bare.git/hooks/pre-commit":            "#!/bin/sh\n",
		"deploy/HEAD":                          "ref: refs/heads/main\n",
		"Bare.GIT/CONFIG":                      "[core]\n\tfsmonitor = x\n", // bare.git's on a folding W
		"bare.git/Hooks/post-merge":            "#!/bin/sh\n",
		"cfg/Head":                             "ref: refs/heads/main\n", // beside W's config, folded
		".git/remotes/old":                     "URL: https://evil.example.test/r.git\n",
		".git/branches/old":                    "https://evil.example.test/r.git\n",
		".git/remotes/new":                     "URL: https://evil.example.test/r.git\n",
		".git/branches/new":                    "https://evil.example.test/r.git#main\n",
		".git/modules/sub/remotes/origin":      "URL: https://evil.example.test/r.git\n",
		".git/worktrees/wt/branches/x":         "https://evil.example.test/r.git\n",
		"nested/.git/Remotes/x":                "URL: https://evil.example.test/r.git\n",
		".GIT/BRANCHES/y":                      "https://evil.example.test/r.git\n",
		"bare.git/remotes/x":                   "URL: https://evil.example.test/r.git\n",
		"bare.git/Branches/x":                  "https://evil.example.test/r.git\n",
		"mirror/HEAD":                          "ref: refs/heads/main\n", // makes W's branches/ git's
		// Not refused: ordinary names outside git directories, and git data.
		"src/hooks/useThing.ts":     "y\n",
		"lib/config":                "a=2\n",
		".git/refs/heads/feature":   "1111\n",
		".git/info/exclude":         "*.o\n",
		".git/refs/remotes/up/main": "1111\n",
		"src/remotes/x":             "URL: https://example.test/\n",
	})
	got, err := Compute(context.Background(), w, s, m, Options{})
	must(t, err)
	gm := byPath(got)
	allowed := map[string]bool{"src/hooks/useThing.ts": true, "lib/config": true, ".git/info/exclude": true, "src/remotes/x": true}
	// Refs are reviewed as commits (package gitreview), not listed (gitDerived).
	for _, p := range []string{".git/refs/heads/feature", ".git/refs/remotes/up/main"} {
		if c, ok := gm[p]; ok {
			t.Errorf("%s listed as %s", p, c.Kind)
		}
	}
	for _, p := range []string{
		".git/config.worktree", ".git/worktrees/wt/config.worktree", ".git/worktrees/wt/gitdir",
		".git/worktrees/wt/commondir", ".git/commondir", ".git/objects/info/alternates",
		".git/objects/info/http-alternates", ".git/info/attributes", ".git/modules/sub/config",
		".git/modules/sub/config.worktree", ".git/modules/sub/hooks/post-checkout",
		"nested/.git/config.worktree", "nested/.git/objects/info/alternates", "sub/.git", "other/.git",
		"bare.git/config", "bare.git/hooks/pre-commit", "deploy/HEAD",
		"Bare.GIT/CONFIG", "bare.git/Hooks/post-merge", "cfg/Head",
		"src/hooks/useThing.ts", "lib/config", ".git/info/exclude",
		".git/remotes/old", ".git/branches/old", ".git/remotes/new", ".git/branches/new",
		".git/modules/sub/remotes/origin", ".git/worktrees/wt/branches/x", "nested/.git/Remotes/x",
		".GIT/BRANCHES/y", "bare.git/remotes/x", "bare.git/Branches/x",
		"src/remotes/x", "mirror/HEAD",
	} {
		c, ok := gm[p]
		if !ok {
			t.Errorf("%s: no change", p)
			continue
		}
		if refused := c.Kind == KindRefused; refused == allowed[p] {
			t.Errorf("%s: %s %q, want refused=%v", p, c.Kind, c.Reason, !allowed[p])
		}
	}
	if r := gm["bare.git/config"].Reason; r != "config of a bare git repository (bare.git holds HEAD)" {
		t.Errorf("bare.git/config reason %q", r)
	}
	if r := gm["mirror/HEAD"].Reason; r != "makes mirror a bare git repository holding branches" {
		t.Errorf("mirror/HEAD reason %q", r)
	}
	if r := gm["bare.git/Branches/x"].Reason; r != "branches/ of a bare git repository (bare.git holds HEAD)" {
		t.Errorf("bare.git/Branches/x reason %q", r)
	}
}

// TestSymlinksIntoGitRefused: a symlink S adds or retargets whose target resolves
// (lexically, and through S's symlinks) into a .git directory is refused, and the reason
// names the link, never its target.
func TestSymlinksIntoGitRefused(t *testing.T) {
	w, s, _ := setup(t, nil, true)
	writeFiles(t, w, map[string]string{".git/HEAD": "x", ".git/hooks/pre-commit.sample": "x", "sub/.git/config": "x", "a/f": "x"})
	must(t, os.Symlink("a", filepath.Join(w, "retarget")))
	must(t, os.Symlink("sub", filepath.Join(w, "subdir")))
	m := testSnapshot(t, w, s, true)
	links := map[string]string{
		"myhooks":  ".git/hooks",
		"gitlink":  ".git",
		"x":        "sub/.git/config",
		"a/up":     "../.git/hooks/pre-commit",
		"a/dotdot": "../a/../.git",
		"via":      "subdir/.git/config", // through a symlink S already holds
		"chain1":   "chain2/hooks",       // through a symlink S adds
		"chain2":   "gitlink",
		"fine":     "a/f",
		"root":     "..",
		"a/parent": "..",
		"notgit":   ".gitignore",
	}
	for l, tgt := range links {
		if l == "root" {
			continue // escapes W: refused for that reason
		}
		must(t, os.Symlink(tgt, filepath.Join(s, l)))
	}
	must(t, os.Remove(filepath.Join(s, "retarget")))
	must(t, os.Symlink(".git/hooks", filepath.Join(s, "retarget")))
	got, err := Compute(context.Background(), w, s, m, Options{})
	must(t, err)
	gm := byPath(got)
	ok := map[string]bool{"fine": true, "a/parent": true, "notgit": true}
	for l := range links {
		if l == "root" {
			continue
		}
		want := "symlink " + l + ": target is inside a .git directory"
		c := gm[l]
		if ok[l] {
			if c.Kind != KindSymlink {
				t.Errorf("%s: %s %q, want symlink", l, c.Kind, c.Reason)
			}
			continue
		}
		if c.Kind != KindRefused || c.Reason != want {
			t.Errorf("%s: %s %q, want refused %q", l, c.Kind, c.Reason, want)
		}
	}
	if c := gm["retarget"]; c.Kind != KindRefused || !strings.Contains(c.Reason, "inside a .git directory") {
		t.Errorf("retarget: %s %q, want refused", c.Kind, c.Reason)
	}
}

// TestBelowRefusedRefused: every change below a refused directory is refused too, so
// applying the children can never create the refused directory (evil/.git).
func TestBelowRefusedRefused(t *testing.T) {
	w, s, _ := setup(t, nil, true)
	writeFiles(t, w, map[string]string{"a.txt": "a"})
	m := testSnapshot(t, w, s, true)
	writeFiles(t, s, map[string]string{
		"evil/.git/HEAD":         "ref: refs/heads/main\n",
		"evil/.git/objects/x":    "x",
		"evil/.git/refs/heads/m": "0",
		"evil/ok.txt":            "fine",
		"evil-sibling/.gitkeep":  "",
	})
	got, err := Compute(context.Background(), w, s, m, Options{})
	must(t, err)
	gm := byPath(got)
	for _, p := range []string{"evil/.git", "evil/.git/HEAD", "evil/.git/objects", "evil/.git/objects/x", "evil/.git/refs/heads/m"} {
		if gm[p].Kind != KindRefused {
			t.Errorf("%s: %s %q, want refused", p, gm[p].Kind, gm[p].Reason)
		}
	}
	if r := gm["evil/.git/HEAD"].Reason; r != "below evil/.git, which is refused" {
		t.Errorf("evil/.git/HEAD reason %q", r)
	}
	for _, p := range []string{"evil", "evil/ok.txt", "evil-sibling", "evil-sibling/.gitkeep"} {
		if gm[p].Kind != KindAdded {
			t.Errorf("%s: %s %q, want added", p, gm[p].Kind, gm[p].Reason)
		}
	}
}
