package diff

import "strings"

// DefaultProtected lists the paths Compute always refuses for flush, relative to every
// git directory (".git" at any depth, so nested repositories, submodules under
// .git/modules/<name>/ and worktrees under .git/worktrees/<name>/ are covered too).
// Writing them gives the agent code execution on the host the next time git runs, or
// points git at a repository the agent controls:
//
//   - ".git" itself: a directory, or a file ("gitdir: <path>") redirecting the git dir;
//   - "hooks/": anything below a hooks component inside a git directory;
//   - "config", "config.worktree": core.fsmonitor, core.hooksPath, filter drivers, ...
//     (git-config(1); config.worktree is read when extensions.worktreeConfig is set);
//   - "commondir", "gitdir": a worktree's or linked git dir's pointer to another git
//     directory (gitrepository-layout(5));
//   - "objects/info/alternates", "objects/info/http-alternates": object stores borrowed
//     from other repositories (gitrepository-layout(5));
//   - "info/attributes": per-repository attributes select filter, diff and merge drivers
//     by name. Unlike .gitattributes (only high-risk, see riskyRoot) it is neither tracked
//     nor shown by git status, so a change there would never be seen again after review.
//
// The files are matched by name anywhere below a ".git" component (a branch named
// "config" under refs/ is refused too: being over-strict there costs nothing). Entries
// ending in '/' are directory prefixes; the others match the last path component(s).
var DefaultProtected = []string{
	".git", ".git/hooks/", ".git/config", ".git/config.worktree", ".git/commondir", ".git/gitdir",
	".git/objects/info/alternates", ".git/objects/info/http-alternates", ".git/info/attributes",
}

// gitDirFiles are the file names git reads inside a git directory as configuration or
// as a pointer to other git directories (see DefaultProtected).
var gitDirFiles = map[string]bool{"config": true, "config.worktree": true, "commondir": true, "gitdir": true}

// gitDirSuffixes are multi-component paths inside a git directory (see DefaultProtected).
var gitDirSuffixes = []string{"objects/info/alternates", "objects/info/http-alternates", "info/attributes"}

// ProtectedPath returns the DefaultProtected rule path matches ("" when none). Flush
// calls it again for every path it writes and every directory it creates.
func ProtectedPath(p string) string { return protectedPath(p, nil) }

// protectedPath returns the rule a path matches ("" when none): DefaultProtected relative
// to any ".git" component (see DefaultProtected), then extra as plain prefixes relative
// to the root.
func protectedPath(p string, extra []string) string {
	comps := strings.Split(p, "/")
	for i, c := range comps {
		if c != ".git" {
			continue
		}
		if rule := gitDirRule(comps[i+1:]); rule != "" {
			return rule
		}
	}
	for _, e := range extra {
		if matchPrefix(p, e) {
			return e
		}
	}
	return ""
}

// gitDirRule returns the DefaultProtected rule for the components after a ".git"
// component ("" when none).
func gitDirRule(after []string) string {
	if len(after) == 0 {
		return ".git"
	}
	for _, a := range after {
		if a == "hooks" {
			return ".git/hooks/"
		}
	}
	return gitFileRule(after)
}

// gitFileRule returns the DefaultProtected rule whose file the components rel name,
// matched by the last component(s) only ("" when none).
func gitFileRule(rel []string) string {
	if last := rel[len(rel)-1]; gitDirFiles[last] {
		return ".git/" + last
	}
	joined := strings.Join(rel, "/")
	for _, s := range gitDirSuffixes {
		if joined == s || strings.HasSuffix(joined, "/"+s) {
			return ".git/" + s
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

// PathRisk returns why review treats the slash path p (relative to the workspace) as
// high-risk, "" when it does not: such a change is never applied by --all.
func PathRisk(p string) string { return pathRisk(p) }

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
