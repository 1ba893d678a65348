package diff

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/gitconfig"
	"brood.dev/brood/frontend/manifest"
)

// maxIncludeDepth is git's limit on nested config includes (config.c, MAX_INCLUDE_DEPTH).
const maxIncludeDepth = 10

// maxConfigSize bounds how much of one git config file gitIncludes reads (1 MiB): more
// is no config a developer wrote, and W's files are read on the host.
const maxConfigSize = 1 << 20

// gitIncludes returns, keyed by foldPath of the path relative to w, every file inside w
// that a git config of W includes, with the reason brood diff shows ("git: included by
// .git/config (include.path)"). Seeds are every git config the walk wn found (a "config"
// or "config.worktree" below a ".git" component, a root ".gitconfig" or
// ".config/git/config") and, when W/.git is a gitfile, its git dir's config. Includes
// are followed transitively to git's depth of 10, include.path and every
// includeIf.<condition>.path alike (whatever the condition: it may hold later); a
// relative path is relative to the including file's directory, "~/" is $HOME. A target
// counts when its path, lexically or with symlinks resolved, lies inside w, whether or
// not it exists yet (the agent may create it). Unreadable or malformed configs are
// skipped: git fails on them too.
func gitIncludes(w string, wn []node) map[string]string {
	w = filepath.Clean(w)
	realW, err := filepath.EvalSymlinks(w)
	if err != nil {
		return nil
	}
	type cfg struct {
		abs   string
		depth int
	}
	var queue []cfg
	for _, n := range wn {
		if n.st.Type == manifest.TypeRegular && isGitConfigPath(n.path) {
			queue = append(queue, cfg{abs: filepath.Join(w, n.path)})
		}
	}
	if dir := gitfileDir(w); dir != "" {
		queue = append(queue, cfg{abs: filepath.Join(dir, "config")}, cfg{abs: filepath.Join(dir, "config.worktree")})
	}
	out := make(map[string]string)
	seen := make(map[string]bool)
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		if seen[c.abs] {
			continue
		}
		seen[c.abs] = true
		name := displayName(w, c.abs)
		for _, inc := range readIncludes(c.abs) {
			target := expandInclude(inc.path, filepath.Dir(c.abs))
			if target == "" {
				continue
			}
			why := "git: included by " + name + " (" + inc.key + ")"
			for _, rel := range insideW(w, realW, target) {
				if _, ok := out[foldPath(rel)]; !ok {
					out[foldPath(rel)] = why
				}
			}
			if c.depth+1 < maxIncludeDepth {
				queue = append(queue, cfg{abs: target, depth: c.depth + 1})
			}
		}
	}
	return out
}

// isGitConfigPath reports whether the W-relative path p is a git config file git reads
// for a repository or a user whose HOME is W.
func isGitConfigPath(p string) bool {
	f := foldPath(p)
	if f == ".gitconfig" || f == ".config/git/config" {
		return true
	}
	comps := strings.Split(f, "/")
	last := comps[len(comps)-1]
	return (last == "config" || last == "config.worktree") && slices.Contains(comps[:len(comps)-1], ".git")
}

// gitfileDir returns the git dir a "gitdir: <path>" file at W/.git names (absolute;
// relative to W when relative), or "" when W/.git is no such file (gitrepository-layout(5)).
func gitfileDir(w string) string {
	b, ok := readSmall(filepath.Join(w, ".git"))
	if !ok {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	dir, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "gitdir: ")
	if !ok || dir == "" {
		return ""
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(w, dir)
	}
	return filepath.Clean(dir)
}

// include is one include path of a git config and the variable that names it.
type include struct{ key, path string }

// readIncludes returns the include.path and includeIf.*.path values of the git config
// at abs (none when it is not a readable regular file or does not parse).
func readIncludes(abs string) []include {
	b, ok := readSmall(abs)
	if !ok {
		return nil
	}
	c, err := gitconfig.Parse(b)
	if err != nil {
		return nil
	}
	var out []include
	for _, s := range c.Sections {
		if s.Name != "include" && s.Name != "includeif" {
			continue
		}
		key := "include.path"
		if s.Name == "includeif" {
			key = "includeIf." + s.Sub + ".path"
		}
		for _, v := range s.Vars {
			if v.Name == "path" && !v.NoValue && v.Value != "" {
				out = append(out, include{key: key, path: v.Value})
			}
		}
	}
	return out
}

// readSmall reads the regular file at abs, at most maxConfigSize bytes; ok is false when
// it is absent, not a regular file (opened O_NONBLOCK, so a FIFO never blocks) or larger.
func readSmall(abs string) ([]byte, bool) {
	fd, err := unix.Open(abs, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	f := os.NewFile(uintptr(fd), abs)
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() > maxConfigSize {
		return nil, false
	}
	b, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil || len(b) > maxConfigSize {
		return nil, false
	}
	return b, true
}

// expandInclude returns the absolute, cleaned path an include value names, relative to
// dir ("" for forms it cannot place: "~user/", "%(prefix)/", or "~/" without a HOME).
func expandInclude(v, dir string) string {
	switch {
	case v == "~" || strings.HasPrefix(v, "~/"):
		home, err := os.UserHomeDir()
		if err != nil || home == "" {
			return ""
		}
		return filepath.Join(home, strings.TrimPrefix(v, "~"))
	case strings.HasPrefix(v, "~"), strings.HasPrefix(v, "%(prefix)/"):
		return ""
	case filepath.IsAbs(v):
		return filepath.Clean(v)
	}
	return filepath.Join(dir, v)
}

// insideW returns the W-relative paths that target names inside w: lexically, and with
// the symlinks of its longest existing ancestor resolved (realW is w resolved).
func insideW(w, realW, target string) []string {
	var out []string
	if rel, ok := relInside(w, target); ok {
		out = append(out, rel)
	}
	dir, base := target, ""
	for {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			if rel, ok := relInside(realW, filepath.Join(r, base)); ok && (len(out) == 0 || out[0] != rel) {
				out = append(out, rel)
			}
			return out
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return out
		}
		base = filepath.Join(filepath.Base(dir), base)
		dir = parent
	}
}

// relInside returns p relative to root when p lies strictly inside root.
func relInside(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", false
	}
	return filepath.ToSlash(rel), true
}

// displayName names a config file for a reason: relative to w when inside it.
func displayName(w, abs string) string {
	if rel, ok := relInside(w, abs); ok {
		return Escape(rel)
	}
	return Escape(abs)
}
