package diff

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGitIncludesAreHighRisk: files W's git configs include (include.path and
// includeIf.*.path, relative to the including file, transitively, in nested
// repositories too, and through a symlinked directory) are high-risk with the including
// file named, whether they exist in W or S creates them; includes outside W are not W's.
func TestGitIncludesAreHighRisk(t *testing.T) {
	w, s, _ := setup(t, nil, true)
	outside := filepath.Join(t.TempDir(), "outside.cfg")
	writeFiles(t, w, map[string]string{
		".git/HEAD": "ref: refs/heads/main\n",
		".git/config": "[core]\n\tbare = false\n[include]\n\tpath = ../repo.gitconfig\n" +
			"[includeIf \"gitdir:/nowhere/\"]\n\tpath = ../conf/when.cfg\n[include]\n\tpath = " + outside + "\n",
		"repo.gitconfig":           "[include]\n\tpath = nested/deeper.cfg\n", // relative to repo.gitconfig
		"conf/when.cfg":            "[user]\n\tname = x\n",
		"vendor/lib/.git/config":   "[include]\n\tpath = ../../lib.cfg\n", // vendor/lib.cfg
		"vendor/lib/.git/HEAD":     "ref: refs/heads/main\n",
		"real/linked.cfg":          "[core]\n",
		"plain.cfg":                "[core]\n",
		"docs/not-a-config/config": "[include]\n\tpath = ../../plain.cfg\n", // no .git component: not read
	})
	must(t, os.Symlink("real", filepath.Join(w, "lnk")))
	writeFiles(t, w, map[string]string{".git/config.worktree": "[include]\n\tpath = ../lnk/linked.cfg\n"})
	m := testSnapshot(t, w, s, true)
	writeFiles(t, s, map[string]string{
		"repo.gitconfig":    "[core]\n\tfsmonitor = ./evil\n",
		"nested/deeper.cfg": "[core]\n\tpager = ./evil\n", // created by S
		"conf/when.cfg":     "[core]\n\tsshCommand = ./evil\n",
		"vendor/lib.cfg":    "[core]\n",
		"real/linked.cfg":   "[core]\n\tfsmonitor = x\n",
		"plain.cfg":         "[core]\n\tfsmonitor = x\n",
	})
	got, err := Compute(context.Background(), w, s, m, Options{})
	must(t, err)
	gm := byPath(got)
	for p, by := range map[string]string{
		"repo.gitconfig":    ".git/config (include.path)",
		"nested/deeper.cfg": "repo.gitconfig (include.path)",
		"conf/when.cfg":     ".git/config (includeIf.gitdir:/nowhere/.path)",
		"vendor/lib.cfg":    "vendor/lib/.git/config (include.path)",
		"real/linked.cfg":   ".git/config.worktree (include.path)",
	} {
		if c := gm[p]; c.Risk != "git: included by "+by {
			t.Errorf("%s: %s risk %q, want included by %s", p, c.Kind, c.Risk, by)
		}
	}
	if c := gm["plain.cfg"]; c.Kind == "" || c.Risk != "" {
		t.Errorf("plain.cfg: %s risk %q, want a plain change", c.Kind, c.Risk)
	}
	if inc := gitIncludes(w, nil); len(inc) != 0 {
		t.Errorf("gitIncludes without a walk: %v", inc)
	}
	for k := range gitIncludesOf(t, w) {
		if strings.Contains(k, "outside") {
			t.Errorf("include outside W listed as %q", k)
		}
	}
}

// gitIncludesOf returns gitIncludes of w after a walk.
func gitIncludesOf(t *testing.T, w string) map[string]string {
	t.Helper()
	r, err := openRoot("W", w)
	must(t, err)
	defer r.close()
	wn, _, err := walkTree(context.Background(), r, 1)
	must(t, err)
	return gitIncludes(w, wn)
}

// TestGitfileIncludes: W/.git as a gitdir file points at a git dir outside W whose config
// includes a file inside W.
func TestGitfileIncludes(t *testing.T) {
	w, _, _ := setup(t, nil, true)
	gd := t.TempDir()
	writeFiles(t, gd, map[string]string{"config": "[include]\n\tpath = " + filepath.Join(w, "in-w.cfg") + "\n"})
	writeFiles(t, w, map[string]string{".git": "gitdir: " + gd + "\n"})
	inc := gitIncludesOf(t, w)
	if want := "git: included by " + filepath.Join(gd, "config") + " (include.path)"; inc["in-w.cfg"] != want {
		t.Errorf("gitIncludes = %v, want in-w.cfg %q", inc, want)
	}
}
