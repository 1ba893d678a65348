package diff

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/manifest"
)

func TestProtectedPath(t *testing.T) {
	extra := []string{"secrets/", "deploy.sh"}
	for _, tc := range []struct{ in, want string }{
		{".git", ".git"},
		{".git/hooks", ".git/hooks/"},
		{".git/hooks/pre-commit", ".git/hooks/"},
		{".git/config", ".git/config"},
		{"vendor/lib/.git/hooks/post-checkout", ".git/hooks/"},
		{"vendor/lib/.git", ".git"},
		{".git/modules/sub/hooks/x", ".git/hooks/"},
		{".git/modules/sub/config", ".git/config"},
		{".git/index", ""},
		{".git/objects/ab/cdef", ""},
		{".git/refs/heads/config", ".git/config"}, // over-strict by design (DefaultProtected)
		{".git/config.worktree", ".git/config.worktree"},
		{".git/worktrees/wt/config.worktree", ".git/config.worktree"},
		{".git/worktrees/wt/gitdir", ".git/gitdir"},
		{".git/worktrees/wt/commondir", ".git/commondir"},
		{".git/commondir", ".git/commondir"},
		{".git/objects/info/alternates", ".git/objects/info/alternates"},
		{".git/modules/a/b/objects/info/alternates", ".git/objects/info/alternates"},
		{".git/info/attributes", ".git/info/attributes"},
		{".git/info/exclude", ""},
		{".git/modules/refs/config", ".git/config"},
		{"x/.git/modules/sub/config.worktree", ".git/config.worktree"},
		{"src/hooks/useThing.ts", ""},
		{"config", ""},
		{"secrets/x", "secrets/"},
		{"secrets", ""},
		{"deploy.sh", "deploy.sh"},
		{"deploy.sh.bak", ""},
	} {
		if got := protectedPath(tc.in, extra); got != tc.want {
			t.Errorf("protectedPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPathRisk(t *testing.T) {
	for _, tc := range []struct {
		in    string
		risky bool
	}{
		{".git/index", true},
		{"sub/.git/HEAD", true},
		{".github/workflows/ci.yml", true},
		{".github/ISSUE_TEMPLATE.md", false},
		{".gitlab-ci.yml", true},
		{".husky/pre-commit", true},
		{".pre-commit-config.yaml", true},
		{"lefthook.yml", true},
		{".circleci/config.yml", true},
		{"Jenkinsfile", true},
		{".envrc", true},
		{"web/.envrc", true},
		{".gitattributes", true},
		{".vscode/tasks.json", true},
		{"src/main.go", false},
		{"docs/.github/workflows/x.yml", false},
		{".gitignore", false},
	} {
		if got := pathRisk(tc.in); (got != "") != tc.risky {
			t.Errorf("pathRisk(%q) = %q, want risky=%v", tc.in, got, tc.risky)
		}
	}
}

// TestTouchedWIsNoConflict: with manifest hashes, a file the developer rewrote in W
// with the same bytes is not a change of W, so S's edit is a plain modification; a real
// W edit makes it a conflict. Extra protected prefixes are refused.
func TestTouchedWIsNoConflict(t *testing.T) {
	w, s, _ := setup(t, nil, true)
	writeFiles(t, w, map[string]string{"same.txt": "v1\n", "edited.txt": "v1\n", "deploy/run.sh": "x"})
	m := testSnapshot(t, w, s, true)
	writeFiles(t, s, map[string]string{"same.txt": "agent\n", "edited.txt": "agent\n", "deploy/run.sh": "y"})
	must(t, os.Remove(filepath.Join(w, "same.txt")))
	writeFiles(t, w, map[string]string{"same.txt": "v1\n", "edited.txt": "dev!\n"})
	got, err := Compute(context.Background(), w, s, m, Options{Protected: []string{"deploy/"}})
	must(t, err)
	gm := byPath(got)
	if gm["same.txt"].Kind != KindModified {
		t.Errorf("same.txt: %s %q, want modified", gm["same.txt"].Kind, gm["same.txt"].Reason)
	}
	if gm["edited.txt"].Kind != KindConflict {
		t.Errorf("edited.txt: %s, want conflict", gm["edited.txt"].Kind)
	}
	if c := gm["deploy/run.sh"]; c.Kind != KindRefused || c.Reason != "protected path (deploy/)" {
		t.Errorf("deploy/run.sh: %s %q, want refused as protected", c.Kind, c.Reason)
	}
}

// TestSanitizedNeverFlushed: a file the snapshot rewrote (a git config with credentials
// removed) is no change while S leaves it alone, and refused when S touches it (its base
// in S is not W's content, so a "modification" would write the sanitized copy over W).
func TestSanitizedNeverFlushed(t *testing.T) {
	w, s, _ := setup(t, nil, true)
	writeFiles(t, w, map[string]string{"vendor/x/gitconfig": "[credential]\n\thelper = store\n"})
	m := testSnapshot(t, w, s, true)
	writeFiles(t, s, map[string]string{"vendor/x/gitconfig": "[core]\n"}) // what the snapshot wrote
	e := m.Lookup("vendor/x/gitconfig")
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(s, "vendor/x/gitconfig"), &st))
	e.Sanitized = true
	e.S = manifest.FromStat(&st)
	got, err := Compute(context.Background(), w, s, m, Options{})
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("untouched sanitized copy listed: %+v", got)
	}
	writeFiles(t, s, map[string]string{"vendor/x/gitconfig": "[core]\n\tfsmonitor = evil\n"})
	got, err = Compute(context.Background(), w, s, m, Options{})
	must(t, err)
	if len(got) != 1 || got[0].Kind != KindRefused {
		t.Fatalf("touched sanitized copy: %+v, want refused", got)
	}
}
