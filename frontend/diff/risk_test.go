package diff

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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
		// Names compared by foldName: git's own files on a case-insensitive volume.
		{".GIT/hooks/x", ".git/hooks/"},
		{".Git/config", ".git/config"},
		{".git/HOOKS/pre-commit", ".git/hooks/"},
		{"vendor/.gIt/Config.Worktree", ".git/config.worktree"},
		{".g\u200cit/config", ".git/config"}, // HFS+ ignores U+200C
		{".GIT", ".git"},
		{".git/OBJECTS/INFO/ALTERNATES", ".git/objects/info/alternates"},
		{"SECRETS/x", "secrets/"},
		{"Deploy.SH", "deploy.sh"},
		{".gitx/config", ""},
	} {
		if got := protectedPath(tc.in, extra); got != tc.want {
			t.Errorf("protectedPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// riskExample returns a path a riskRules pattern names: "*" in a component becomes "x",
// a final "**" a file "x" below the directory.
func riskExample(pattern string) string {
	comps := strings.Split(pattern, "/")
	for i, c := range comps {
		if c == "**" {
			comps[i] = "x"
			continue
		}
		comps[i] = strings.ReplaceAll(c, "*", "x")
	}
	return strings.Join(comps, "/")
}

// upperASCII spells p as a case-insensitive volume would also find it.
func upperASCII(p string) string { return strings.ToUpper(p) }

// TestRiskRulesEveryRow: every row of riskRules flags its own example with its own
// reason (no row is shadowed by an earlier one) at the root, at depth and in another
// case; a "**" row flags the directory itself too.
func TestRiskRulesEveryRow(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range riskRules {
		if seen[r.match] {
			t.Errorf("row %q listed twice", r.match)
		}
		seen[r.match] = true
		if r.match != strings.ToLower(r.match) || r.why == "" {
			t.Errorf("row %q: patterns are lower-case and every row has a reason", r.match)
		}
		ex := riskExample(r.match)
		for _, p := range []string{ex, "deep/er/" + ex, upperASCII(ex), "Home/Alice/" + upperASCII(ex)} {
			if got := PathRisk(p); got != r.why {
				t.Errorf("PathRisk(%q) = %q, want row %q: %q", p, got, r.match, r.why)
			}
		}
		if dir, ok := strings.CutSuffix(r.match, "/**"); ok {
			if got := PathRisk("a/" + riskExample(dir)); got != r.why {
				t.Errorf("PathRisk(directory %q) = %q, want %q", dir, got, r.why)
			}
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
		{"sub/.GIT/HEAD", true},
		{".github/workflows/ci.yml", true},
		{"docs/.github/workflows/x.yml", true}, // a nested repository's CI
		{".github/ISSUE_TEMPLATE.md", false},
		{"src/.gitattributes", true},
		{"SRC/.GitAttributes", true},
		{".ENVRC", true},
		{"src/.gitattri\u200cbutes", true}, // HFS+ ignores U+200C
		{"caf\u00e9/.Bashrc", true},
		{".GitHub/Workflows/ci.yml", true},
		{"web/.envrc", true},
		{".gitconfig", true},
		{".bashrc", true},
		{".profile", true},
		{".zshenv", true},
		{".config/git/config", true},
		{".config/git/attributes", true},
		{".config/git/ignore", true},
		{".config/fish/conf.d/x.fish", true},
		{"etc/profile.d/evil.sh", true},
		{".devcontainer.json", true},
		{".devcontainer/devcontainer.json", true},
		{".devcontainer/python/devcontainer.json", true},
		{"sub/.npmrc", true},
		{"a/b/.yarnrc", true},
		{"a/.yarnrc.yml", true},
		{"a/.config/pip/pip.conf", true},
		{"a/.pip/pip.conf", true},
		{"a/.config/go/env", true},
		{"a/.cargo/config", true},
		{"a/.cargo/config.toml", true},
		{".venv/lib/python3.12/site-packages/evil.pth", true},
		{"proj.code-workspace", true},
		{"Makefile", true},
		{"crates/x/build.rs", true},
		{"tests/conftest.py", true},
		{"src/main.go", false},
		{".gitignore", false},
		{".editorconfig", false},
		{"go.mod", false},
		{"go.work", false},
		{"models/resnet.pth", false}, // a PyTorch checkpoint, not a site directory's .pth
		{"README.md", false},
		{"config/pip.conf.d", false},
		{".cargo/registry/cache/x.crate", false},
		{"src/hooks/useThing.ts", false},
	} {
		if got := PathRisk(tc.in); (got != "") != tc.risky {
			t.Errorf("PathRisk(%q) = %q, want risky=%v", tc.in, got, tc.risky)
		}
	}
}

func TestLinkRisk(t *testing.T) {
	for _, tc := range []struct {
		in    string
		risky bool
	}{
		{".config", true},   // .config/git/**, .config/fish/**, ...
		{"a/.Vscode", true}, // .vscode/tasks.json
		{".cargo", true},
		{".github", true},
		{"src", false},
		{"docs", false},
	} {
		if got := linkRisk(tc.in); (got != "") != tc.risky {
			t.Errorf("linkRisk(%q) = %q, want risky=%v", tc.in, got, tc.risky)
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

// TestRiskDocListsEveryRow: docs/review-risk.md lists every row with its reason.
func TestRiskDocListsEveryRow(t *testing.T) {
	b, err := os.ReadFile("../../docs/review-risk.md")
	must(t, err)
	for _, r := range riskRules {
		if row := "| `" + r.match + "` | " + r.why + " |"; !strings.Contains(string(b), row) {
			t.Errorf("docs/review-risk.md lacks %s", row)
		}
	}
}

// TestExcludedSecretsAnySpelling: S cannot write another spelling of a secret the snapshot
// excluded, nor below one (on a case-insensitive W it is the developer's secret).
func TestExcludedSecretsAnySpelling(t *testing.T) {
	w, s, _ := setup(t, nil, true)
	writeFiles(t, w, map[string]string{".env": "SECRET=1\n", "sub/.env/key": "k\n", "ok.txt": "o\n"})
	m := testSnapshot(t, w, s, true)
	writeFiles(t, s, map[string]string{".ENV": "SECRET=agent\n", "sub/.Env/key2": "x\n", "ok.txt": "O\n"})
	got, err := Compute(context.Background(), w, s, m, Options{Case: CaseSensitive})
	must(t, err)
	gm := byPath(got)
	if c := gm[".ENV"]; c.Kind != KindRefused || c.Reason != "another spelling of .env, excluded from the snapshot by secret rule .env" {
		t.Errorf(".ENV: %s %q", c.Kind, c.Reason)
	}
	if c := gm["sub/.Env/key2"]; c.Kind != KindRefused || !strings.Contains(c.Reason, "below sub/.env, excluded from the snapshot") {
		t.Errorf("sub/.Env/key2: %s %q", c.Kind, c.Reason)
	}
	if c := gm["ok.txt"]; c.Kind != KindModified {
		t.Errorf("ok.txt: %s %q", c.Kind, c.Reason)
	}
}

// TestLinkIntoGitDirFolded: a symlink into another spelling of .git is into .git.
func TestLinkIntoGitDirFolded(t *testing.T) {
	for _, tc := range []struct {
		path, target string
		into         bool
	}{
		{"myhooks", ".GIT/hooks", true},
		{"a/x", "../.Git/config", true},
		{"x", "sub/.g\u200cit/config", true},
		{"x", "sub/.gitx/config", false},
		{"x", "docs", false},
	} {
		if got := LinkIntoGitDir(tc.path, tc.target); got != tc.into {
			t.Errorf("LinkIntoGitDir(%q, %q) = %v, want %v", tc.path, tc.target, got, tc.into)
		}
	}
}

// BenchmarkPathRisk: the cost of deciding one path's risk (every change calls it once).
func BenchmarkPathRisk(b *testing.B) {
	paths := []string{"src/main.go", "internal/pkg/deep/er/file_test.go", ".github/workflows/ci.yml", "caf\u00e9/r\u00e9sum\u00e9.txt"}
	for b.Loop() {
		for _, p := range paths {
			PathRisk(p)
		}
	}
}

// BenchmarkFoldPath: the cost of one collision key (every path of W and S on a folding W).
func BenchmarkFoldPath(b *testing.B) {
	for _, p := range []string{"internal/pkg/deep/er/File_test.go", "caf\u00e9/R\u00e9sum\u00e9.txt"} {
		b.Run(p, func(b *testing.B) {
			for b.Loop() {
				foldPath(p)
			}
		})
	}
}
