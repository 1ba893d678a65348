package diff

import "strings"

// DefaultProtected lists the paths Compute always refuses for flush: writing them gives
// the agent code execution on the host the next time git runs (hooks, core.fsmonitor,
// core.hooksPath and friends in config, a .git file redirecting the git dir). Entries
// ending in '/' are directory prefixes; others match the path exactly or as a directory.
// The same rules apply inside nested repositories and .git/modules/ (see protectedPath).
var DefaultProtected = []string{".git", ".git/hooks/", ".git/config"}

// protectedPath returns the rule a path matches ("" when none): DefaultProtected relative
// to any ".git" component (so sub/.git/hooks/x and .git/modules/m/hooks/x match), then
// extra as plain prefixes relative to the root.
func protectedPath(p string, extra []string) string {
	comps := strings.Split(p, "/")
	for i, c := range comps {
		if c != ".git" {
			continue
		}
		after := comps[i+1:]
		switch {
		case len(after) == 0:
			return ".git"
		case after[0] == "config" && len(after) == 1:
			return ".git/config"
		}
		for j, a := range after {
			if a == "hooks" {
				return ".git/hooks/"
			}
			// .git/modules/<name>/config is a submodule's config.
			if a == "config" && j == len(after)-1 && after[0] == "modules" {
				return ".git/config"
			}
		}
	}
	for _, e := range extra {
		if matchPrefix(p, e) {
			return e
		}
	}
	return ""
}

// matchPrefix reports whether p is rule or lies below it. A rule ending in '/' matches
// only below it.
func matchPrefix(p, rule string) bool {
	if strings.HasSuffix(rule, "/") {
		return strings.HasPrefix(p, rule)
	}
	return p == rule || strings.HasPrefix(p, rule+"/")
}

// riskyRoot lists root-relative paths whose change can run code on the developer's
// machine or in CI without a further human step: CI definitions (GitHub, GitLab,
// CircleCI, Travis, Azure, Bitbucket, Buildkite, Drone, Woodpecker, Jenkins, AppVeyor),
// hook managers (husky, pre-commit, lefthook, overcommit, plain .githooks), git
// attributes/submodules (filter drivers, submodule URLs) and editor/devcontainer tasks
// that run on open. Directories end in '/'.
var riskyRoot = []struct{ rule, why string }{
	{".github/workflows/", "CI definition"},
	{".github/actions/", "CI definition"},
	{".gitlab-ci.yml", "CI definition"},
	{".gitlab/", "CI definition"},
	{".circleci/", "CI definition"},
	{".travis.yml", "CI definition"},
	{"azure-pipelines.yml", "CI definition"},
	{"bitbucket-pipelines.yml", "CI definition"},
	{".buildkite/", "CI definition"},
	{".drone.yml", "CI definition"},
	{".woodpecker.yml", "CI definition"},
	{".woodpecker/", "CI definition"},
	{"Jenkinsfile", "CI definition"},
	{"appveyor.yml", "CI definition"},
	{".husky/", "git hook manager"},
	{".pre-commit-config.yaml", "git hook manager"},
	{".pre-commit-hooks.yaml", "git hook manager"},
	{"lefthook.yml", "git hook manager"},
	{"lefthook.yaml", "git hook manager"},
	{".lefthook.yml", "git hook manager"},
	{"lefthook-local.yml", "git hook manager"},
	{".overcommit.yml", "git hook manager"},
	{".githooks/", "git hooks directory"},
	{".gitattributes", "git attributes (filter drivers)"},
	{".gitmodules", "git submodules"},
	{".vscode/tasks.json", "editor task"},
	{".vscode/settings.json", "editor settings"},
	{".devcontainer/", "devcontainer definition"},
}

// pathRisk returns why a path is high-risk by its name alone ("" when it is not): any
// ".git" component, an entry of riskyRoot, or a direnv .envrc in any directory (it runs
// on cd).
func pathRisk(p string) string {
	if p == ".git" || strings.HasPrefix(p, ".git/") || strings.Contains(p, "/.git/") || strings.HasSuffix(p, "/.git") {
		return "git metadata"
	}
	for _, r := range riskyRoot {
		if matchPrefix(p, r.rule) {
			return r.why
		}
	}
	if p == ".envrc" || strings.HasSuffix(p, "/.envrc") {
		return "direnv script"
	}
	return ""
}
