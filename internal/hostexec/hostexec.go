// Package hostexec is the one way brood runs a program on the host. Every program is a row
// of programs (who runs it, as which user, why), and every run gets the same contract,
// whatever directory brood was started in and whatever its environment holds:
//
//  1. The program is looked up on Path (root-owned system directories), never on the
//     caller's PATH, or given as an absolute path chosen by brood's own code.
//  2. Its working directory is Dir ("/"), never the current directory: a tool started in
//     a workspace W would read W's own configuration (.npmrc, go.work, pip/ on
//     python's path, ...) or run W's code. A caller may set a brood-owned directory
//     instead (kernel.Fetch downloads into its cache).
//  3. Its environment is Path, LC_ALL=C and only the variables its row passes through
//     (proxy settings for apt, say); nothing like APT_CONFIG, GIT_*, PYTHON*, NPM_*,
//     LD_PRELOAD or LD_LIBRARY_PATH is inherited.
//  4. Its standard input is /dev/null unless the caller sets one.
//
// A test parses every non-test Go file of the repository and fails when a package other
// than this one (and the exempt ones, exempt) imports os/exec or starts processes by
// other means.
//
// Privilege: none of its own: it runs programs with the privilege of its caller (brood as
// the developer, broodd-helper as root, image builds as root).
package hostexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ExitError is os/exec's error for a program that ran and exited unsuccessfully, so
// callers can tell it from a failure to start or wait without importing os/exec.
type ExitError = exec.ExitError

// Cmd is os/exec's command, so callers can set ExtraFiles, SysProcAttr and the output
// without importing os/exec themselves.
type Cmd = exec.Cmd

// Path is the search path for programs and the PATH they run with: the system
// directories (root-owned on Debian), in the order the helper has always used.
const Path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// searchPath is where LookPath looks: Path (a test points it at its fakes).
var searchPath = Path

// Dir is every program's working directory: outside any workspace.
const Dir = "/"

// ErrUnlisted: a program is not a row of programs.
var ErrUnlisted = errors.New("program not listed in hostexec")

// proxyEnv are the proxy variables apt and mmdebstrap honour (apt.conf(5) "Acquire::http::Proxy"
// falls back to http_proxy); they name the developer's network, not a workspace's content.
var proxyEnv = []string{"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"}

// program is one row: the file name brood runs and the variables passed through to it.
type program struct {
	name string
	pass []string
}

// selfName is the row of brood's own binary re-executing itself (Self); pagerName the
// row of the developer's pager (Pager).
const (
	selfName  = "(self)"
	pagerName = "(pager)"
)

// programs lists every program brood runs on the host.
var programs = []program{
	// qemu-system-x86_64: the VMM. The helper runs `-version` as root when probing
	// (Backend.Probe); the runner (`broodd-helper vm-run`) starts it as the developer's uid,
	// confined by Landlock, with the tap as fd 3. It needs nothing from the environment.
	{name: "qemu-system-x86_64"},
	// apt-cache: `broodd-helper image build` (root) and the VM test set-up resolve
	// linux-image-amd64 to the ABI package (kernel.ResolvePackage).
	{name: "apt-cache", pass: proxyEnv},
	// apt-get: `apt-get download` of that kernel package into brood's cache directory, and
	// `apt-get update` once when the lists are stale (kernel.Fetch); same caller and user
	// as apt-cache.
	{name: "apt-get", pass: proxyEnv},
	// dpkg-deb: `dpkg-deb -x` unpacks the downloaded package in brood's cache (kernel.Fetch).
	{name: "dpkg-deb"},
	// depmod: `depmod -b` builds modules.dep for the unpacked modules (kernel.Fetch).
	{name: "depmod"},
	// xz: decompresses the kernel's xz payload (BCJ filter, which no Go xz library reads)
	// from standard input (kernel.Vmlinux, during kernel.Fetch).
	{name: "xz"},
	// mmdebstrap: builds an image's root tree from Debian packages (image.Build, run by
	// `broodd-helper image build` and the VM test set-up); as root in root mode,
	// otherwise in unshare mode. Its temporary files go to the developer's TMPDIR.
	{name: "mmdebstrap", pass: append([]string{"TMPDIR"}, proxyEnv...)},
	// mkfs.erofs: packs an image tree into an EROFS file in brood's image cache
	// (image.FromDir), same caller as mmdebstrap.
	{name: "mkfs.erofs"},
	// $PAGER (less when unset): `brood diff -p` on a terminal pipes the escaped patch to
	// the developer's pager through /bin/sh -c, as git does (Pager). It runs as the
	// developer, in Dir, with the terminal variables a pager needs and PAGER/LESS from
	// the developer's own environment; never anything the workspace sets.
	{name: pagerName, pass: []string{"TERM", "COLORTERM", "LESS", "LESSCHARSET", "LANG", "LC_CTYPE", "HOME", "COLUMNS", "LINES"}},
	// gh: `brood run --git-token` reads the developer's GitHub token with `gh auth
	// token` (frontend/cli), as the developer; gh finds its configuration and keyring
	// through these variables.
	{name: "gh", pass: []string{"HOME", "XDG_CONFIG_HOME", "GH_CONFIG_DIR", "GH_HOST", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS"}},
	// brood's own binary: broodd-helper (root) starts `vm-spawn` as root and the spawner
	// starts `vm-run` runners as the developer's uid (helper.StartSpawner), each with
	// descriptors passed as ExtraFiles.
	{name: selfName},
}

// lookup returns the row called name.
func lookup(name string) (program, error) {
	for _, p := range programs {
		if p.name == name && name != selfName && name != pagerName {
			return p, nil
		}
	}
	return program{}, fmt.Errorf("run %s: %w", name, ErrUnlisted)
}

// LookPath finds the listed program name on Path and returns its absolute path.
func LookPath(name string) (string, error) {
	if _, err := lookup(name); err != nil {
		return "", err
	}
	for _, dir := range filepath.SplitList(searchPath) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("find %s on %s: %w", name, searchPath, exec.ErrNotFound)
}

// Command returns the command running the listed program name, found on Path, with args.
// ctx kills it when done (as exec.CommandContext). Errors: ErrUnlisted, or
// exec.ErrNotFound when it is not installed.
func Command(ctx context.Context, name string, args ...string) (*Cmd, error) {
	path, err := LookPath(name)
	if err != nil {
		return nil, err
	}
	return CommandPath(ctx, name, path, args...)
}

// CommandPath is Command for the listed program name installed at the absolute path
// (resolved earlier by LookPath, or configured: qemu.Backend.Path).
func CommandPath(ctx context.Context, name, path string, args ...string) (*Cmd, error) {
	p, err := lookup(name)
	if err != nil {
		return nil, err
	}
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("run %s at %q: not an absolute path: %w", name, path, exec.ErrNotFound)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	setup(cmd, p.pass)
	return cmd, nil
}

// Self returns the command re-executing brood's own binary exe (absolute, from
// os.Executable) with args; it is never cancelled by a context (callers own its life
// through Pdeathsig and Wait).
func Self(exe string, args ...string) *Cmd {
	cmd := &exec.Cmd{Path: exe, Args: append([]string{exe}, args...)}
	setup(cmd, nil)
	return cmd
}

// Pager returns the command running the developer's pager: pager (a $PAGER value, run
// by /bin/sh -c; "less" when empty) with LESS=FRX unless the environment sets LESS, as
// git does. The caller sets Stdin (the text) and Stdout (the terminal).
func Pager(pager string) *Cmd {
	if pager == "" {
		pager = "less"
	}
	p, _ := lookupRow(pagerName)
	cmd := &exec.Cmd{Path: "/bin/sh", Args: []string{"sh", "-c", pager}}
	setup(cmd, p.pass)
	if _, ok := os.LookupEnv("LESS"); !ok {
		cmd.Env = append(cmd.Env, "LESS=FRX")
	}
	return cmd
}

// lookupRow returns the row called name, including the special rows.
func lookupRow(name string) (program, bool) {
	for _, p := range programs {
		if p.name == name {
			return p, true
		}
	}
	return program{}, false
}

// SelfContext is Self for a re-execution that ctx kills when done (as
// exec.CommandContext): `broodd-helper image pull` bounds its unprivileged unpacker so.
func SelfContext(ctx context.Context, exe string, args ...string) *Cmd {
	cmd := exec.CommandContext(ctx, exe, args...)
	setup(cmd, nil)
	return cmd
}

// Env returns the environment a program gets: PATH=Path, LC_ALL=C and the variables of
// pass that are set in brood's own environment.
func Env(pass []string) []string {
	env := []string{"PATH=" + Path, "LC_ALL=C"}
	for _, k := range pass {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func setup(cmd *exec.Cmd, pass []string) {
	cmd.Dir = Dir
	cmd.Env = Env(pass)
	cmd.Stdin = nil // os/exec connects a nil Stdin to /dev/null
}
