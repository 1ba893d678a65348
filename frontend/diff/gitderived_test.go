package diff

import (
	"context"
	"testing"
)

// TestGitDerivedNotListed: with a .git directory at W's root, the files git derives
// (index, refs, reflogs, objects, pseudo-refs) are no changes, whatever S did to them;
// config, hooks, info/, alternates and a nested repository's files stay listed.
func TestGitDerivedNotListed(t *testing.T) {
	w, s, _ := setup(t, nil, true)
	writeFiles(t, w, map[string]string{
		".git/HEAD": "ref: refs/heads/main\n", ".git/config": "[core]\n", ".git/index": "DIRC",
		".git/refs/heads/main": "1111\n", ".git/logs/HEAD": "x\n", "nested/.git/index": "DIRC",
	})
	m := testSnapshot(t, w, s, true)
	writeFiles(t, s, map[string]string{
		".git/HEAD": "2222\n", ".git/index": "DIRC2", ".git/COMMIT_EDITMSG": "agent work\n",
		".git/ORIG_HEAD": "1111\n", ".git/FETCH_HEAD": "x\n", ".git/packed-refs": "x\n",
		".git/refs/heads/main": "2222\n", ".git/refs/tags/v1": "2222\n", ".git/logs/HEAD": "x\ny\n",
		".git/logs/refs/heads/main": "y\n", ".git/objects/ab/cdef": "z", ".git/objects/pack/pack-1.pack": "p",
		".git/info/refs": "2222\trefs/heads/main\n", ".git/objects/info/packs": "P pack-1.pack\n",
		// Still listed:
		".git/config": "[core]\n\thooksPath = /tmp\n", ".git/hooks/pre-commit": "#!/bin/sh\n",
		".git/info/exclude": "*\n", ".git/objects/info/alternates": "/tmp\n", ".git/shallow": "1111\n",
		"nested/.git/index": "DIRC2", "nested/.git/refs/heads/x": "1\n", "x/.git/index": "DIRC",
	})
	got, err := Compute(context.Background(), w, s, m, Options{})
	must(t, err)
	gm := byPath(got)
	for _, p := range []string{".git/config", ".git/hooks", ".git/hooks/pre-commit", ".git/info/exclude",
		".git/objects/info/alternates", ".git/shallow", "nested/.git/index", "nested/.git/refs/heads/x", "x/.git/index"} {
		if _, ok := gm[p]; !ok {
			t.Errorf("%s not listed", p)
		}
	}
	for _, p := range []string{".git/info/refs", ".git/objects/info/packs"} {
		if c, ok := gm[p]; ok {
			t.Errorf("derived %s listed as %s", p, c.Kind)
		}
	}
	for p, c := range gm {
		if gitDerived(p, false) && p != ".git/objects/info/alternates" {
			t.Errorf("derived %s listed as %s", p, c.Kind)
		}
	}
	if c, ok := gm[".git/objects/info/alternates"]; !ok || c.Kind != KindRefused {
		t.Errorf("alternates: %+v", c)
	}
}

// TestGitDerivedNeedsRootRepo: without a .git directory in W (the agent ran git init),
// the new repository's files are listed as before.
func TestGitDerivedNames(t *testing.T) {
	for p, want := range map[string]bool{".git/index": true, ".git/refs/heads/a/b": true, ".git/objects": true,
		".git/objects/info/alternates": false, ".git/objects/info/packs": true, ".git/config": false,
		".git/info/refs": true, ".git/objects/info/commit-graph": true, ".git/info/exclude": false, ".git/info/attributes": false,
		".git/info/grafts": false, ".git/info/refs/x": false, ".git/info": false,
		".git/hooks/x": false, ".GIT/index": false, "a/.git/index": false, ".git": false, ".git/indexx": false} {
		if got := gitDerived(p, false); got != want {
			t.Errorf("gitDerived(%q) = %v", p, got)
		}
	}
	if !gitDerived(".GIT/Index", true) || gitDerived(".GIT/objects/INFO/Alternates", true) {
		t.Error("folded names")
	}
}

func TestGitDerivedNeedsRootRepo(t *testing.T) {
	w, s, _ := setup(t, map[string]string{"a": "a"}, true)
	m := testSnapshot(t, w, s, true)
	writeFiles(t, s, map[string]string{".git/index": "DIRC", ".git/HEAD": "ref: refs/heads/main\n"})
	got, err := Compute(context.Background(), w, s, m, Options{})
	must(t, err)
	if gm := byPath(got); len(gm) == 0 || gm[".git/index"].Path == "" {
		t.Fatalf("new repository not listed: %+v", got)
	}
}
