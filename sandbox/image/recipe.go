package image

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// Recipe builds an image's tree from Debian packages with mmdebstrap, then runs its hooks.
// Every field and every file under agents/Files goes into the recipe's Key, the digest
// the built image is named by (store.ImageFile(Name, Key)).
type Recipe struct {
	Name    string
	Suite   string   // Debian suite, e.g. "bookworm"
	Variant string   // mmdebstrap variant: "essential", "minbase", ...
	Include []string // extra packages
	// Files names the directory under agents/ (embedded in the binary) holding the
	// agent's pins: package.json and package-lock.json for an npm agent,
	// requirements.txt for a PyPI one. Build copies it to "$BROOD_AGENT_FILES/Files" on
	// the host for the hooks; "" means none.
	Files string
	// Registry is where the hooks fetch the agent from: "npm", "pypi" or "" (Debian only).
	Registry string
	// Hooks are shell commands mmdebstrap runs after installing ("$1" is the tree);
	// they run on the host as the builder, with the tree at "$1".
	Hooks []string
}

// agentFiles holds the agents' pins (agents/NAME/...), written by scripts/bump-agents.sh.
// A variable so tests can give Key other pins.
//
//go:embed agents
var embeddedAgents embed.FS

var agentFiles fs.FS = embeddedAgents

// filesEnv is the environment variable naming, for the hooks, the host directory that
// holds a copy of agents/.
const filesEnv = "BROOD_AGENT_FILES"

// agentHook creates the unprivileged agent user (uid/gid 1000) brood-guest runs as.
// brood-guest mounts a tmpfs on its home at boot, seeded from what the image has there.
const agentHook = `chroot "$1" useradd --create-home --uid 1000 --user-group --shell /bin/sh agent`

// excludeDocs drops documentation, man pages and translations (dpkg path-exclude).
var excludeDocs = []string{
	"--dpkgopt=path-exclude=/usr/share/doc/*",
	"--dpkgopt=path-include=/usr/share/doc/*/copyright",
	"--dpkgopt=path-exclude=/usr/share/man/*",
	"--dpkgopt=path-exclude=/usr/share/locale/*",
	"--dpkgopt=path-exclude=/usr/share/info/*",
}

// Hooks shared by the agent recipes. The registry clients run in the chroot trusting the
// host's CA bundle (copied in for the install and removed after): package registries may
// sit behind a TLS-intercepting proxy whose CA only the host trusts.
const (
	hostCAIn  = `cp /etc/ssl/certs/ca-certificates.crt "$1/tmp/brood-host-ca.crt"`
	hostCAOut = `rm -rf "$1/tmp/brood-host-ca.crt" "$1/root/.npm" "$1/root/.cache"`
	// agentBase are the Debian packages every agent image has besides its runtime
	// (openssh-client: git over SSH through --ssh-agent needs ssh in the guest).
	agentBase = "ca-certificates,git,ripgrep,procps,less,openssh-client"
)

// npmAgent says how an agent is installed from npm.
type npmAgent struct {
	name, suite, bin string
	// nativePkg and native, when set, name the platform package under node_modules and
	// its binary's file name, linked as the command (no Node start-up per run);
	// otherwise the package's npm bin link is, and Node stays in the image.
	nativePkg, native string
	// prune are packages under node_modules removed after the install (platform builds
	// the image does not run).
	prune []string
}

// npmRecipe is an agent installed by `npm ci` from its lock in agents/NAME: npm fetches
// every tarball the lock names and refuses one whose sha512 differs from the lock's
// integrity (EINTEGRITY). Install scripts do not run (--ignore-scripts): the platform
// binary is linked directly instead. npm is purged after the install (with its ~340
// node-* packages), and so is Node when the command is native. The build ends by
// running `bin --version` in the chroot, so an image whose command does not start is
// not stored.
func npmRecipe(a npmAgent) Recipe {
	dir := "/opt/brood/" + a.name
	link := fmt.Sprintf(`ln -s %s/node_modules/.bin/%s "$1/usr/local/bin/%s"`, dir, a.bin, a.bin)
	purge := `chroot "$1" apt-get purge -y --auto-remove npm`
	if a.native != "" {
		link = fmt.Sprintf(`b=$(cd "$1" && find .%s/node_modules/%s -type f -name %s -perm -u+x | sort | head -n1); `+
			`[ -n "$b" ] || { echo "no %s binary in %s" >&2; exit 1; }; ln -s "${b#.}" "$1/usr/local/bin/%s"`,
			dir, a.nativePkg, a.native, a.native, a.nativePkg, a.bin)
		purge += " nodejs"
	}
	hooks := []string{
		agentHook,
		hostCAIn,
		fmt.Sprintf(`mkdir -p "$1/opt/brood" && cp -R "$%s/%s" "$1%s"`, filesEnv, a.name, dir),
		`chroot "$1" env HOME=/root NODE_EXTRA_CA_CERTS=/tmp/brood-host-ca.crt npm_config_cafile=/tmp/brood-host-ca.crt ` +
			`npm ci --prefix ` + dir + ` --ignore-scripts --omit=dev --no-audit --no-fund`,
		link,
	}
	for _, p := range a.prune {
		hooks = append(hooks, fmt.Sprintf(`rm -rf "$1%s/node_modules/%s"`, dir, p))
	}
	hooks = append(hooks, purge, fmt.Sprintf(`chroot "$1" /usr/local/bin/%s --version`, a.bin), hostCAOut)
	return Recipe{
		Name: a.name, Suite: a.suite, Variant: "minbase", Files: a.name, Registry: "npm",
		Include: strings.Split(agentBase+",nodejs,npm", ","),
		Hooks:   hooks,
	}
}

// pipRecipe is an agent installed by pip into a venv from agents/name/requirements.txt
// in hash-checking mode: every distribution pinned by version and sha256, anything
// unpinned or with another hash refused.
func pipRecipe(name, suite, bin string) Recipe {
	dir := "/opt/brood/" + name
	return Recipe{
		Name: name, Suite: suite, Variant: "minbase", Files: name, Registry: "pypi",
		Include: strings.Split(agentBase+",python3,python3-venv", ","),
		Hooks: []string{
			agentHook,
			hostCAIn,
			fmt.Sprintf(`mkdir -p "$1/opt/brood" && cp -R "$%s/%s" "$1%s"`, filesEnv, name, dir),
			`chroot "$1" python3 -m venv ` + dir + `/venv`,
			`chroot "$1" env HOME=/root PIP_CERT=/tmp/brood-host-ca.crt ` + dir + `/venv/bin/pip install --no-cache-dir --no-deps --require-hashes -r ` + dir + `/requirements.txt`,
			fmt.Sprintf(`ln -s %s/venv/bin/%s "$1/usr/local/bin/%s"`, dir, bin, bin),
			fmt.Sprintf(`chroot "$1" /usr/local/bin/%s --version`, bin),
			hostCAOut,
		},
	}
}

// Recipes are the built-in images.
//
//   - test: Essential packages + busybox-static + git + openssh-client, ~30 s to build;
//     CI boots it, and `brood run shell` runs it.
//   - codex, claude-code, opencode, gemini: minbase + Debian's nodejs/npm + the agent's
//     npm package from its lock, npm purged after; codex, claude-code and opencode run
//     their platform package's native binary (codex's static musl build; opencode's x64
//     "baseline" build, which needs no AVX2: QEMU's TCG CPU has none) and keep no Node.
//     bookworm's Node 18 is enough where Node only installs; gemini runs on Node
//     (needs >= 20: trixie's).
//   - hermes: minbase + Debian's python3 + `hermes-agent` from PyPI in a venv.
var Recipes = map[string]Recipe{
	"test": {
		Name: "test", Suite: "bookworm", Variant: "essential",
		Include: []string{"busybox-static", "git", "passwd", "openssh-client"},
		Hooks:   []string{agentHook},
	},
	"codex": npmRecipe(npmAgent{name: "codex", suite: "bookworm", bin: "codex",
		nativePkg: "@openai/codex-linux-x64", native: "codex"}),
	"claude-code": npmRecipe(npmAgent{name: "claude-code", suite: "trixie", bin: "claude",
		nativePkg: "@anthropic-ai/claude-code-linux-x64", native: "claude",
		prune: []string{"@anthropic-ai/claude-code-linux-x64-musl"}}),
	"opencode": npmRecipe(npmAgent{name: "opencode", suite: "trixie", bin: "opencode",
		nativePkg: "opencode-linux-x64-baseline", native: "opencode", prune: []string{"opencode-linux-x64"}}),
	"gemini": npmRecipe(npmAgent{name: "gemini", suite: "trixie", bin: "gemini"}),
	"hermes": pipRecipe("hermes", "trixie", "hermes"),
}

// MmdebstrapArgs returns mmdebstrap's arguments to build r into dir. mode is
// mmdebstrap's --mode: "root" when building as root, "unshare" otherwise.
func MmdebstrapArgs(r Recipe, mode, dir string) []string {
	a := []string{"--mode=" + mode, "--variant=" + r.Variant}
	if len(r.Include) > 0 {
		a = append(a, "--include="+strings.Join(r.Include, ","))
	}
	a = append(a, excludeDocs...)
	for _, h := range r.Hooks {
		a = append(a, "--customize-hook="+h)
	}
	return append(a, r.Suite, dir)
}

// recipeKeyVersion changes when the way a recipe becomes an image changes in a way its
// fields do not show (Build's steps, MkfsArgs), so every image is rebuilt once.
const recipeKeyVersion = "brood-recipe-v1"

// Key is the recipe's digest, hex SHA-256 over every field, mmdebstrap's fixed
// arguments, mkfs.erofs's arguments and every file of agents/r.Files (path and
// content): what names the image built from it. Two recipes with the same Key build the
// same image up to what the Debian archive serves on the day (Debian packages are
// pinned by suite, not by version). It returns the error of reading the files.
func (r Recipe) Key() (string, error) {
	h := sha256.New()
	fields, _ := json.Marshal(r) // plain strings and slices: cannot fail
	fmt.Fprintf(h, "%s\n%s\n%q\n%q\n", recipeKeyVersion, fields, excludeDocs, MkfsArgs("TREE", "OUT"))
	if r.Files == "" {
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	err := fs.WalkDir(agentFiles, path.Join("agents", r.Files), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(agentFiles, p)
		fmt.Fprintf(h, "%q %d\n%s", p, len(b), b)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("image %s: read pins: %w", r.Name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Pin is one package an agent recipe installs from a registry, as its pins name it.
type Pin struct {
	Package   string // "@openai/codex", "hermes-agent"
	Version   string // exact: "0.171.0"
	Integrity string // npm: "sha512-<base64>" (dist.integrity); PyPI: "sha256:<hex>"; "" when unpinned
}

// Pins returns the agent's own package pin (the one package.json depends on, or the
// first requirement), read from agents/r.Files; nil for a recipe without files. Errors
// name the file that is missing or malformed.
func (r Recipe) Pins() ([]Pin, error) {
	switch r.Registry {
	case "npm":
		return npmPins(path.Join("agents", r.Files))
	case "pypi":
		return pipPins(path.Join("agents", r.Files, "requirements.txt"))
	}
	return nil, nil
}

// npmPins reads dir's package.json dependencies and their lock entries; every entry of
// the lock must have a version and a sha512 integrity (ErrUnpinned otherwise).
func npmPins(dir string) ([]Pin, error) {
	var pkg struct{ Dependencies map[string]string }
	var lock struct {
		Packages map[string]struct{ Version, Integrity string }
	}
	for f, v := range map[string]any{"package.json": &pkg, "package-lock.json": &lock} {
		b, err := fs.ReadFile(agentFiles, path.Join(dir, f))
		if err == nil {
			err = json.Unmarshal(b, v)
		}
		if err != nil {
			return nil, fmt.Errorf("read pins %s/%s: %w", dir, f, err)
		}
	}
	for p, e := range lock.Packages { // npm ci checks each tarball against these
		if p != "" && (e.Version == "" || !strings.HasPrefix(e.Integrity, "sha512-")) {
			return nil, fmt.Errorf("read pins %s: lock entry %s has no version or sha512 integrity: %w", dir, p, ErrUnpinned)
		}
	}
	var pins []Pin
	for name, want := range pkg.Dependencies {
		e, ok := lock.Packages["node_modules/"+name]
		if !ok || e.Version != want || !strings.HasPrefix(e.Integrity, "sha512-") {
			return nil, fmt.Errorf("read pins %s: %s@%s: lock has %q %q: %w", dir, name, want, e.Version, e.Integrity, ErrUnpinned)
		}
		pins = append(pins, Pin{Package: name, Version: e.Version, Integrity: e.Integrity})
	}
	return pins, nil
}

// pipPins reads the requirements file's "name==version [--hash=sha256:HEX]" lines.
func pipPins(file string) ([]Pin, error) {
	b, err := fs.ReadFile(agentFiles, file)
	if err != nil {
		return nil, fmt.Errorf("read pins %s: %w", file, err)
	}
	var pins []Pin
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		name, ver, ok := strings.Cut(f[0], "==")
		if !ok {
			return nil, fmt.Errorf("read pins %s: %q: not name==version: %w", file, f[0], ErrUnpinned)
		}
		p := Pin{Package: name, Version: ver}
		if len(f) > 1 {
			p.Integrity = strings.TrimPrefix(f[1], "--hash=")
		}
		pins = append(pins, p)
	}
	return pins, nil
}

// checkPinned returns ErrUnpinned when a pin of r has no integrity hash (a requirements
// file written without PyPI access).
func (r Recipe) checkPinned() error {
	pins, err := r.Pins()
	if err != nil {
		return err
	}
	for _, p := range pins {
		if p.Integrity == "" {
			return fmt.Errorf("image %s: %s==%s has no hash: %w (run scripts/bump-agents.sh %s where %s is reachable)",
				r.Name, p.Package, p.Version, ErrUnpinned, r.Name, r.Registry)
		}
	}
	return nil
}
