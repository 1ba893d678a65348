package gitreview

import (
	"errors"
	"strings"
	"testing"
)

// TestNamedBranch: --branch NAME is NAME for the only changed ref, a prefix
// NAME/<short> when several changed (tags under tags/, a detached HEAD as HEAD).
func TestNamedBranch(t *testing.T) {
	for _, c := range []struct {
		name, ref string
		several   bool
		want      string
	}{
		{"feature/x", "refs/heads/master", false, "refs/heads/feature/x"},
		{"refs/heads/feature/x", "refs/heads/master", false, "refs/heads/feature/x"},
		{"review", "refs/heads/master", true, "refs/heads/review/master"},
		{"review", "refs/tags/v1", true, "refs/heads/review/tags/v1"},
		{"review", "HEAD", true, "refs/heads/review/HEAD"},
	} {
		if got := NamedBranch(c.name, c.ref, c.several); got != c.want {
			t.Errorf("NamedBranch(%q, %q, %v) = %q, want %q", c.name, c.ref, c.several, got, c.want)
		}
	}
}

// TestCheckBranchName: a name the developer gives is held to git-check-ref-format(1),
// as the agent's refs are; the reason shows the name escaped.
func TestCheckBranchName(t *testing.T) {
	for _, ok := range []string{"feature/x", "agent-work", "refs/heads/a.b", "v1.2"} {
		if err := CheckBranchName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for bad, why := range map[string]string{
		"":              "not a branch name",
		"HEAD":          "not a branch name",
		"-x":            "not a branch name",
		"a..b":          `".."`,
		"../../config":  `".."`,
		"a\x1b[31m":     `control byte`,
		"a b":           "character git forbids",
		"a@{1}":         "character git forbids",
		"x.lock":        ".lock",
		"a//b":          "empty component",
		".hidden":       "starting with '.'",
		"a/":            "ends in",
		"a.":            "ends in",
		"refs/heads/":   "ends in",
		"x~1":           "character git forbids",
		"name\nnewline": "control byte",
	} {
		err := CheckBranchName(bad)
		if err == nil || !strings.Contains(err.Error(), why) || strings.ContainsAny(err.Error(), "\x1b\n") {
			t.Errorf("%q: %v, want %q", bad, err, why)
		}
	}
}

// TestBranchFree: a branch is refused when it exists (loose or packed) or when git's
// directory/file rule forbids it; Apply under a developer's name creates it and
// DeleteRef removes it again.
func TestBranchFree(t *testing.T) {
	w, s := newRepo(t)
	id := agentCommit(t, s)
	git(t, w, "branch", "loose")
	git(t, w, "branch", "packed")
	git(t, w, "branch", "dir/sub")
	git(t, w, "pack-refs", "--all")
	git(t, w, "branch", "loose2")
	for _, b := range []string{"refs/heads/loose2", "refs/heads/packed", "refs/heads/master", "refs/heads/dir", "refs/heads/loose/x", "refs/heads/dir/sub"} {
		if err := BranchFree(w, b); !errors.Is(err, ErrRefExists) {
			t.Errorf("%s: %v", b, err)
		}
	}
	if err := BranchFree(w, "refs/heads/dir/other"); err != nil {
		t.Errorf("dir/other: %v", err)
	}
	r, err := Inspect(w, s)
	if err != nil {
		t.Fatal(err)
	}
	u := r.Refs[0]
	if err := r.Apply(&u, NamedBranch("packed", u.Name, false), noJournal); !errors.Is(err, ErrRefExists) {
		t.Fatalf("apply over a packed branch: %v", err)
	}
	mine := NamedBranch("agent/work", u.Name, false)
	if err := r.Apply(&u, mine, noJournal); err != nil {
		t.Fatal(err)
	}
	if got := git(t, w, "rev-parse", "agent/work"); got != id {
		t.Fatalf("agent/work = %q, want %s", got, id)
	}
	if removed, err := DeleteRef(w, mine, id); !removed || err != nil {
		t.Fatalf("DeleteRef = %v, %v", removed, err)
	}
	if out := git(t, w, "branch", "--list", "agent/*"); out != "" {
		t.Fatalf("branches = %q", out)
	}
}
