package snapshot

import (
	"fmt"
	"path"
	"strings"
)

// Rule is a secret rule: an entry whose name matches is never copied into S, at any depth,
// whatever its type; a matching directory is not descended. Matching is on the entry's
// name (one path component) and ignores case (strings.ToLower), so ".ENV" and "Key.PEM" match too.
type Rule struct {
	Name  string // shown to the user, e.g. "*.pem" or ".ssh/"
	match func(lowerName string) bool
	// parent, when set, is the (lower-case) name the entry's directory must have too:
	// ".docker/config.json" excludes config.json only inside a directory named .docker.
	parent string
}

// BuiltinRules are the secret rules no configuration can negate: a rule set by the user or
// the workspace can add secrets but never make one of these copyable into the snapshot.
// ".git-credentials" is git's credential store file (git-credential-store(1)).
var BuiltinRules = []Rule{
	{".env", func(n string) bool { return n == ".env" }, ""},
	{".env.*", func(n string) bool { return strings.HasPrefix(n, ".env.") }, ""},
	{"*.pem", func(n string) bool { return strings.HasSuffix(n, ".pem") }, ""},
	{"*.key", func(n string) bool { return strings.HasSuffix(n, ".key") }, ""},
	{"id_rsa*", func(n string) bool { return strings.HasPrefix(n, "id_rsa") }, ""},
	{"id_ed25519*", func(n string) bool { return strings.HasPrefix(n, "id_ed25519") }, ""},
	{".ssh/", func(n string) bool { return n == ".ssh" }, ""},
	{".aws/", func(n string) bool { return n == ".aws" }, ""},
	{".gnupg/", func(n string) bool { return n == ".gnupg" }, ""},
	{".netrc", func(n string) bool { return n == ".netrc" }, ""},
	{".git-credentials", func(n string) bool { return n == ".git-credentials" }, ""},
	// SSH keys of the other algorithms, package-registry and cluster credentials, and
	// PKCS#12 / PuTTY key files. Names match exactly (or by the given prefix or suffix):
	// npmrc.go and kube/config.go are ordinary files.
	{"id_ecdsa*", func(n string) bool { return strings.HasPrefix(n, "id_ecdsa") }, ""},
	{"id_dsa*", func(n string) bool { return strings.HasPrefix(n, "id_dsa") }, ""},
	{".npmrc", func(n string) bool { return n == ".npmrc" }, ""},
	{".pypirc", func(n string) bool { return n == ".pypirc" }, ""},
	{".docker/config.json", func(n string) bool { return n == "config.json" }, ".docker"},
	{".kube/config", func(n string) bool { return n == "config" }, ".kube"},
	{"*.p12", func(n string) bool { return strings.HasSuffix(n, ".p12") }, ""},
	{"*.pfx", func(n string) bool { return strings.HasSuffix(n, ".pfx") }, ""},
	{"*.ppk", func(n string) bool { return strings.HasSuffix(n, ".ppk") }, ""},
}

// rules is the effective rule list: BuiltinRules then the extra patterns.
type rules []Rule

// newRules appends extra path.Match patterns (matched against the lower-cased name) to
// the built-in rules. Extra rules can only add exclusions. It returns ErrBadRule for a
// malformed pattern or one containing '/'.
func newRules(extra []string) (rules, error) {
	rs := append(rules(nil), BuiltinRules...)
	for _, p := range extra {
		lp := strings.ToLower(p)
		if _, err := path.Match(lp, ""); err != nil || p == "" || strings.Contains(p, "/") {
			return nil, fmt.Errorf("secret rule %q: %w", p, ErrBadRule)
		}
		rs = append(rs, Rule{p, func(n string) bool { ok, _ := path.Match(lp, n); return ok }, ""})
	}
	return rs, nil
}

// match returns the name of the first rule that name, in a directory named parent
// ("" for the root), matches, or "".
func (rs rules) match(parent, name string) string {
	ln := strings.ToLower(name)
	for _, r := range rs {
		if r.match(ln) && (r.parent == "" || r.parent == strings.ToLower(parent)) {
			return r.Name
		}
	}
	return ""
}

// isGitConfig reports whether rel (a '/'-separated path) is a git config file that
// Take sanitizes: "config" or "config.worktree" inside a ".git" directory at any depth,
// including .git/modules/<name>/ (names may hold '/') and .git/worktrees/<name>/. Only
// refs/, logs/ and objects/ directly in .git or in .git/worktrees/<name>/ are skipped
// (there such names are refs or data); below .git/modules/ every such name is sanitized,
// because a submodule may itself be named "refs": a branch named "config" of a submodule
// is then emptied in S, which costs far less than an unsanitized config. Names compare
// ignoring case (strings.ToLower): on a case-insensitive W, git opening .git/config gets .GIT/CONFIG.
func isGitConfig(rel string) bool {
	parts := strings.Split(strings.ToLower(rel), "/")
	base := parts[len(parts)-1]
	if base != "config" && base != "config.worktree" {
		return false
	}
	git := -1 // index of the last ".git" component
	for i, p := range parts[:len(parts)-1] {
		if p == ".git" {
			git = i
		}
	}
	if git < 0 {
		return false
	}
	after := parts[git+1 : len(parts)-1] // directories between .git and the file
	data := func(p string) bool { return p == "refs" || p == "logs" || p == "objects" }
	switch {
	case len(after) > 0 && data(after[0]):
		return false
	case len(after) > 2 && after[0] == "worktrees" && data(after[2]):
		return false
	}
	return true
}
