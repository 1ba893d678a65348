package diff

import (
	"path"
	"slices"
	"strings"
)

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
//     by name. Unlike .gitattributes (only high-risk, see riskRules) it is neither tracked
//     nor shown by git status, so a change there would never be seen again after review.
//
// The files are matched by name anywhere below a ".git" component (a branch named
// "config" under refs/ is refused too: being over-strict there costs nothing). Entries
// ending in '/' are directory prefixes; the others match the last path component(s).
// Names are compared by foldName, so ".GIT/hooks/x", ".Git/config" and
// ".git/HOOKS/x" are refused on every volume (on a case-insensitive one they are
// git's own files).
var DefaultProtected = []string{
	".git", ".git/hooks/", ".git/config", ".git/config.worktree", ".git/commondir", ".git/gitdir",
	".git/objects/info/alternates", ".git/objects/info/http-alternates", ".git/info/attributes",
}

// gitDirFiles are the file names git reads inside a git directory as configuration or
// as a pointer to other git directories (see DefaultProtected).
var gitDirFiles = map[string]bool{"config": true, "config.worktree": true, "commondir": true, "gitdir": true}

// gitDirSuffixes are multi-component paths inside a git directory (see DefaultProtected).
var gitDirSuffixes = []string{"objects/info/alternates", "objects/info/http-alternates", "info/attributes"}

// ProtectedPath returns the DefaultProtected rule path matches ("" when none), comparing
// names by foldName. Flush calls it again for every path it writes and every directory
// it creates.
func ProtectedPath(p string) string { return protectedPath(p, nil) }

// protectedPath returns the rule a path matches ("" when none): DefaultProtected relative
// to any ".git" component (see DefaultProtected), then extra as plain prefixes relative
// to the root, all compared by foldName.
func protectedPath(p string, extra []string) string {
	p = foldPath(p)
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
		if matchPrefix(p, foldPath(e)) {
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

// riskRule is one row of riskRules: a name a host tool acts on, and why.
type riskRule struct {
	// match is a slash-separated pattern of lower-case (foldName) components, each
	// matched by path.Match against a path component; it matches the path's last
	// components at any depth. A final "**" matches zero or more components (the
	// directory itself, so a symlink put in its place, and everything below it).
	match string
	why   string // shown by brood diff, apply and review
}

// riskRules lists every name whose change lets a host tool run code, or choose the code
// or the server it runs, when the developer does something routine in W afterwards: cd
// into it, open a shell or an editor, run git, install, build or test. Each row's reason
// names the tool and what it does with the file (trailing comments add where the name is
// documented when the reason does not say it). brood diff marks such changes high-risk
// with the row's reason; `apply --all` and `review --all` never apply them; naming the
// path applies it after a second confirmation.
//
// Every row matches at any depth (and by foldName, so ".ENVRC" is ".envrc"): W may be a
// home directory or contain one, a nested repository runs its own CI and hooks, git reads
// .gitattributes in every directory, and start-up files are sourced from whatever
// directory HOME or ZDOTDIR names. A row never needs the root: over-flagging a file
// named like a start-up file in a subdirectory costs one confirmation.
//
// Not rows, by decision: .gitignore and .git-blame-ignore-revs (they choose which files
// or commits git skips, never a program; a file .gitignore hides still shows in this
// diff), .editorconfig (indentation and charset only), go.mod and go.work (a toolchain
// line only selects a checksum-verified Go release; replace directives name code the
// developer builds knowingly), Dockerfile (RUN steps run in the build container, not on
// the host), and source files in general: the rows are the files that run without the
// developer deciding to run them.
var riskRules = []riskRule{
	// git (gitattributes(5), gitmodules(5), gitmailmap(5), git-config(1)).
	{".gitattributes", "git: .gitattributes selects filter, diff and merge drivers (programs git runs) in its directory"}, // read in every directory
	{".gitmodules", "git: submodule URLs, paths and update commands"},                                                     // submodule.<name>.update = !cmd runs cmd
	{".mailmap", "git: rewrites the author names and emails log, shortlog and blame show"},                                // gitmailmap(5)
	{".gitconfig", "git: global config (core.fsmonitor, core.pager, aliases, filters run programs)"},                      // ~/.gitconfig
	{".config/git/**", "git: XDG global config, attributes and ignore files"},                                             // $XDG_CONFIG_HOME/git/{config,attributes,ignore}
	{".git-credentials", "git: credential store (credentials git sends to servers)"},                                      // git-credential-store(1)
	{".lfsconfig", "git-lfs: LFS server URLs (where objects and credentials go)"},                                         // git-lfs-config(5)
	{".hg/**", "Mercurial: .hg/hgrc hooks and extensions run on hg commands"},                                             // hgrc(5) [hooks]
	{".hgrc", "Mercurial: user config (hooks, extensions)"},                                                               // ~/.hgrc
	{".jj/**", "jj: repository config (pager, diff and merge tools it runs)"},                                             // .jj/repo/config.toml
	{".githooks/**", "git: hooks directory (core.hooksPath convention)"},                                                  // hooks run on commit, checkout, merge, push
	{".git-hooks/**", "overcommit: hook plugins run on git commit"},                                                       // overcommit's plugin directory

	// git hook managers: install and run hooks on commit, push, checkout.
	{".husky/**", "husky: git hooks"},
	{".pre-commit-config.yaml", "pre-commit: git hooks (repositories and commands it runs)"},
	{".pre-commit-config.yml", "pre-commit: git hooks (repositories and commands it runs)"},
	{".pre-commit-hooks.yaml", "pre-commit: hooks this repository provides"},
	{"lefthook.*", "lefthook: git hooks"},             // lefthook.yml, .yaml, .toml, .json
	{".lefthook.*", "lefthook: git hooks"},            // hidden variant
	{"lefthook-local.*", "lefthook: local git hooks"}, // merged over lefthook.yml
	{".lefthook-local.*", "lefthook: local git hooks"},
	{".lefthook/**", "lefthook: hook scripts"},
	{".overcommit.yml", "overcommit: git hooks"},
	{".simple-git-hooks.*", "simple-git-hooks: git hooks"},
	{"simple-git-hooks.*", "simple-git-hooks: git hooks"},

	// Shell and login start-up files, sourced by every new shell or login.
	{".bashrc", "bash: start-up file run by every interactive shell"},
	{".bash_profile", "bash: login start-up file"},
	{".bash_login", "bash: login start-up file"},
	{".bash_logout", "bash: run when a login shell exits"},
	{".bash_aliases", "bash: sourced by Debian's and Ubuntu's default .bashrc"},
	{".bash_completion", "bash-completion: sourced by every interactive shell"},
	{".profile", "sh, dash, bash: login start-up file"},
	{".shrc", "sh, dash: the file ENV usually names, run by every interactive shell"},
	{".kshrc", "ksh: interactive start-up file"},
	{".mkshrc", "mksh: interactive start-up file"},
	{".zshenv", "zsh: start-up file run by every zsh, even scripts"},
	{".zprofile", "zsh: login start-up file"},
	{".zshrc", "zsh: interactive start-up file"},
	{".zlogin", "zsh: login start-up file"},
	{".zlogout", "zsh: run when a login shell exits"},
	{".cshrc", "csh, tcsh: start-up file"},
	{".tcshrc", "tcsh: start-up file"},
	{".login", "csh, tcsh: login start-up file"},
	{".logout", "csh, tcsh: run when a login shell exits"},
	{".config/fish/**", "fish: config.fish, conf.d and functions run by every fish"},
	{"profile.d/**", "login shells source every profile.d script (/etc/profile.d)"},
	{".inputrc", "readline: key bindings can type commands into the shell"},
	{".pam_environment", "pam_env: environment (PATH, LD_PRELOAD) of every login"},
	{".config/environment.d/**", "systemd: environment of the user's services and session"},
	{".config/autostart/**", "desktop session: programs started at login (XDG autostart)"},
	{".config/systemd/user/**", "systemd: user units started at login or by timers"},
	{".xprofile", "X session: run at graphical login"},
	{".xinitrc", "startx: the X session's program"},
	{".xsession", "X display manager: the session's program"},
	{".local/bin/**", "programs on PATH before the system's (shadows commands)"},
	{".ssh/**", "ssh: ProxyCommand and LocalCommand run programs; authorized_keys grants logins"},

	// Environment loaders that run on cd or on every command.
	{".envrc", "direnv: shell script run on cd"},
	{".direnvrc", "direnv: shell library run with every .envrc"},
	{".config/direnv/**", "direnv: direnvrc and direnv.toml (whitelist allows .envrc without asking)"},
	{".env", "direnv dotenv, docker compose, pipenv, node --env-file: environment (NODE_OPTIONS, LD_PRELOAD) of the commands they run"},
	{".env.*", "dotenv loaders: environment of the commands they run"},
	{"mise.toml", "mise: environment, hooks and tasks run on cd"},
	{".mise.toml", "mise: environment, hooks and tasks run on cd"},
	{"mise.*.toml", "mise: environment, hooks and tasks run on cd"},
	{".config/mise/**", "mise: global config"},
	{".tool-versions", "asdf, mise: tool versions (plugins they download and run)"},
	{"flake.nix", "nix: nix develop and nix-direnv evaluate it on cd"},
	{"shell.nix", "nix: nix-shell and nix-direnv evaluate it on cd"},

	// Dev containers (containers.dev spec): initializeCommand runs on the host.
	{".devcontainer.json", "devcontainer: initializeCommand runs on the host"},
	{".devcontainer/**", "devcontainer: devcontainer.json (and */devcontainer.json), Dockerfiles and scripts it runs"},

	// Editors: tasks, launch configurations and settings run programs on open or save.
	{".vscode/tasks.json", "VS Code: tasks (runOn folderOpen runs them on open)"},
	{".vscode/launch.json", "VS Code: debug launch configurations (programs and preLaunchTask)"},
	{".vscode/settings.json", "VS Code: settings naming programs (interpreters, linters, terminal env)"},
	{".vscode/extensions.json", "VS Code: extensions it asks to install on open"},
	{"*.code-workspace", "VS Code: workspace settings, tasks and launch configurations"},
	{".idea/**", "JetBrains IDEs: run configurations, file watchers, startup tasks"},
	{".run/**", "JetBrains IDEs: shared run configurations"},
	{".zed/**", "Zed: tasks and settings (language servers it starts)"},
	{".helix/**", "Helix: languages.toml names language servers it starts"},
	{".exrc", "vi, vim, neovim: run with 'exrc' set"},
	{".vimrc", "vim: start-up file"},
	{".gvimrc", "gvim: start-up file"},
	{"_vimrc", "vim: start-up file"},
	{".vim/**", "vim: plugins and start-up scripts"},
	{".nvimrc", "neovim: run with 'exrc' set"},
	{".nvim.lua", "neovim: run with 'exrc' set"},
	{".config/nvim/**", "neovim: start-up file and plugins"},
	{".lvimrc", "localvimrc plugin: run on open"},
	{".dir-locals.el", "Emacs: directory variables (eval forms)"},
	{".dir-locals-2.el", "Emacs: directory variables (eval forms)"},
	{".emacs", "Emacs: start-up file"},
	{".emacs.d/**", "Emacs: start-up files and packages"},
	{".config/emacs/**", "Emacs: start-up files and packages"},

	// Package managers: configs that run scripts or change the registry.
	{".npmrc", "npm: registry, script-shell and git programs"},
	{".yarnrc", "yarn 1: registry and yarn-path (a script yarn runs)"},
	{".yarnrc.yml", "yarn: npmRegistryServer, yarnPath and plugins (scripts yarn runs)"},
	{".yarn/releases/**", "yarn: the yarn release yarnPath runs"},
	{".yarn/plugins/**", "yarn: plugins yarn runs"},
	{".pnpmfile.cjs", "pnpm: hooks run on install"},
	{".pnpmfile.mjs", "pnpm: hooks run on install"},
	{".config/pnpm/rc", "pnpm: global config (registry, hooks)"},
	{"pnpm-workspace.yaml", "pnpm: settings (onlyBuiltDependencies lets packages run install scripts)"},
	{"bunfig.toml", "bun: registry and preload scripts run before bun run"},
	{".bunfig.toml", "bun: registry and preload scripts"},
	{"pip.conf", "pip: index-url and extra-index-url (where packages come from)"}, // .pip/pip.conf, .config/pip/pip.conf, /etc/pip.conf
	{"pip.ini", "pip: index-url (Windows name)"},
	{".pypirc", "twine: upload repositories and credentials"},
	{"uv.toml", "uv: index URLs"}, // .config/uv/uv.toml too
	{".condarc", "conda: channels (where packages come from)"},
	{"poetry.toml", "poetry: repositories and virtualenv settings"},
	{".cargo/config", "cargo: registries, rustc-wrapper and target runners (programs cargo runs)"},
	{".cargo/config.toml", "cargo: registries, rustc-wrapper and target runners (programs cargo runs)"},
	{"rust-toolchain", "rustup: toolchain (a path = toolchain runs local binaries as cargo)"},
	{"rust-toolchain.toml", "rustup: toolchain (a path = toolchain runs local binaries as cargo)"},
	{".config/go/env", "go: GOPROXY, GOFLAGS (-toolexec runs a program) for every go command"},
	{"gradle.properties", "gradle: JVM arguments (-javaagent) and properties"},
	{"gradle-wrapper.properties", "gradle wrapper: the Gradle distribution ./gradlew downloads and runs"},
	{".mvn/**", "maven: extensions, JVM options and the wrapper's distribution"},
	{".m2/settings.xml", "maven: mirrors and repositories"},
	{".bundle/config", "bundler: Gemfile location and mirrors"},
	{".gemrc", "gem: sources"},
	{"nuget.config", "NuGet: package sources"},
	{".docker/config.json", "docker: credHelpers run docker-credential-* programs"},
	{".kube/config", "kubectl: exec credential plugins run programs"},
	{".aws/config", "AWS CLI and SDKs: credential_process runs a program"},

	// Build entry points that run on install, open, build or test discovery.
	{"makefile", "make: recipes run by make"},
	{"gnumakefile", "make: recipes run by make"},
	{"cmakelists.txt", "cmake: run on configure (editors configure on open)"},
	{"meson.build", "meson: run on setup"},
	{"build.rs", "cargo: build script run by cargo build and check (rust-analyzer runs it on open)"},
	{"build.gradle", "gradle: build script (IDE import runs it)"},
	{"build.gradle.kts", "gradle: build script (IDE import runs it)"},
	{"settings.gradle", "gradle: settings script (IDE import runs it)"},
	{"settings.gradle.kts", "gradle: settings script (IDE import runs it)"},
	{"gradlew", "gradle wrapper script"},
	{"mvnw", "maven wrapper script"},
	{"package.json", "npm, yarn, pnpm: install scripts (preinstall, postinstall, prepare) and dependencies"},
	{"composer.json", "composer: scripts run on install"},
	{"setup.py", "pip, setuptools: run on install"},
	{"pyproject.toml", "pip: build-system (backend code run on install) and tool settings"},
	{"conftest.py", "pytest: imported on every test run and collection"},
	{"noxfile.py", "nox: sessions"},
	{"tox.ini", "tox: commands"},
	{"sitecustomize.py", "python: imported at every start when on the path"},
	{"usercustomize.py", "python: imported at every start when on the path"},
	{"site-packages/*.pth", "python: import lines in a site directory's .pth files run at every start"},
	{"dist-packages/*.pth", "python: import lines in a site directory's .pth files run at every start"},
	{"gemfile", "bundler: Ruby code evaluated by every bundle command"},
	{"rakefile", "rake: tasks"},
	{"justfile", "just: recipes"},
	{".justfile", "just: recipes"},
	{"taskfile.yml", "task: tasks"},
	{"taskfile.yaml", "task: tasks"},
	{"vagrantfile", "vagrant: Ruby code evaluated by every vagrant command"},
	{"tiltfile", "tilt: runs local commands and builds"},
	{"compose.yaml", "docker compose: containers it starts (privileged, host mounts)"},
	{"compose.yml", "docker compose: containers it starts (privileged, host mounts)"},
	{"docker-compose.yml", "docker compose: containers it starts (privileged, host mounts)"},
	{"docker-compose.yaml", "docker compose: containers it starts (privileged, host mounts)"},

	// CI definitions: run on push with the repository's secrets.
	{".github/workflows/**", "GitHub Actions: workflow"},
	{".github/actions/**", "GitHub Actions: local action used by workflows"},
	{"action.yml", "GitHub Actions: action definition"},
	{"action.yaml", "GitHub Actions: action definition"},
	{".github/dependabot.yml", "Dependabot: registries (insecure-external-code-execution) and update jobs"},
	{".github/dependabot.yaml", "Dependabot: registries (insecure-external-code-execution) and update jobs"},
	{".forgejo/workflows/**", "Forgejo Actions: workflow"},
	{".gitea/workflows/**", "Gitea Actions: workflow"},
	{".gitlab-ci.yml", "GitLab CI: pipeline"},
	{".gitlab/**", "GitLab CI: included pipeline files and templates"},
	{".circleci/**", "CircleCI: pipeline"},
	{".travis.yml", "Travis CI: pipeline"},
	{"azure-pipelines.yml", "Azure Pipelines: pipeline"},
	{"azure-pipelines.yaml", "Azure Pipelines: pipeline"},
	{".azure-pipelines/**", "Azure Pipelines: pipeline templates"},
	{"bitbucket-pipelines.yml", "Bitbucket Pipelines: pipeline"},
	{".buildkite/**", "Buildkite: pipeline"},
	{".drone.yml", "Drone: pipeline"},
	{".woodpecker.yml", "Woodpecker: pipeline"},
	{".woodpecker.yaml", "Woodpecker: pipeline"},
	{".woodpecker/**", "Woodpecker: pipelines"},
	{"jenkinsfile", "Jenkins: pipeline"},
	{"appveyor.yml", "AppVeyor: pipeline"},
	{".appveyor.yml", "AppVeyor: pipeline"},
	{".cirrus.yml", "Cirrus CI: pipeline"},
	{".semaphore/**", "Semaphore: pipeline"},
	{".tekton/**", "Tekton: pipelines"},
	{"cloudbuild.yaml", "Google Cloud Build: build steps"},
	{"cloudbuild.yml", "Google Cloud Build: build steps"},
	{"buildspec.yml", "AWS CodeBuild: build commands"},
	{"bitrise.yml", "Bitrise: workflow"},
	{"codemagic.yaml", "Codemagic: workflow"},
}

// compiledRule is a riskRules row split into its pattern components once.
type compiledRule struct {
	pat   []string // pattern components without a final "**"
	glob  []bool   // pat[i] holds a path.Match metacharacter other than one '*'
	star  []int    // index of pat[i]'s only '*' (prefix*suffix match), -1 when none
	below bool     // the pattern ended in "**"
	rule  *riskRule
}

// compiledRisk is riskRules split for matching (derived from the literal table, in order).
var compiledRisk = compileRisk(riskRules)

func compileRisk(rules []riskRule) []compiledRule {
	out := make([]compiledRule, len(rules))
	for i := range rules {
		pat := strings.Split(rules[i].match, "/")
		c := compiledRule{rule: &rules[i]}
		if pat[len(pat)-1] == "**" {
			c.below, pat = true, pat[:len(pat)-1]
		}
		c.pat = pat
		for _, pc := range pat {
			star := strings.IndexByte(pc, '*')
			glob := strings.ContainsAny(pc, "?[\\") || star >= 0 && strings.Count(pc, "*") > 1
			if glob {
				star = -1
			}
			c.glob, c.star = append(c.glob, glob), append(c.star, star)
		}
		out[i] = c
	}
	return out
}

// PathRisk returns why a change at the slash-separated relative path p is high-risk by
// its name alone ("" when it is not): any ".git" component (git's own files), or the
// first row of riskRules whose pattern matches p's last components, compared by
// foldName. Flagged at any depth.
func PathRisk(p string) string {
	comps := strings.Split(foldPath(p), "/")
	if slices.Contains(comps, ".git") {
		return "git metadata"
	}
	for i := range compiledRisk {
		if compiledRisk[i].matches(comps) {
			return compiledRisk[i].rule.why
		}
	}
	return ""
}

// matches reports whether the folded path components comps end with the pattern, or
// lie below (or at) its directory when it ended in "**".
func (c *compiledRule) matches(comps []string) bool {
	n := len(c.pat)
	if len(comps) < n {
		return false
	}
	if !c.below {
		return c.matchAt(comps[len(comps)-n:])
	}
	for i := 0; i+n <= len(comps); i++ {
		if c.matchAt(comps[i : i+n]) {
			return true
		}
	}
	return false
}

// matchAt reports whether every component of comps (as many as the pattern's) matches.
func (c *compiledRule) matchAt(comps []string) bool {
	for j, pc := range c.pat {
		switch s := c.star[j]; {
		case c.glob[j]:
			if ok, _ := path.Match(pc, comps[j]); !ok {
				return false
			}
		case s >= 0:
			pre, suf := pc[:s], pc[s+1:]
			if len(comps[j]) < len(pre)+len(suf) || !strings.HasPrefix(comps[j], pre) || !strings.HasSuffix(comps[j], suf) {
				return false
			}
		case pc != comps[j]:
			return false
		}
	}
	return true
}

// linkRisk returns why a symlink at p is high-risk because it stands where a directory
// of a riskRules pattern would be ("" when it does not): a link named ".config" or
// ".vscode" makes whatever it points at the files git or the editor reads.
func linkRisk(p string) string {
	comps := strings.Split(foldPath(p), "/")
	for i := range compiledRisk {
		c := &compiledRisk[i]
		for k := range comps {
			rest := comps[k:]
			if len(rest) >= len(c.pat) {
				continue
			}
			short := compiledRule{pat: c.pat[:len(rest)], glob: c.glob[:len(rest)], star: c.star[:len(rest)]}
			if short.matchAt(rest) {
				return "symlink in place of a directory holding " + c.rule.match + " (" + c.rule.why + ")"
			}
		}
	}
	return ""
}
