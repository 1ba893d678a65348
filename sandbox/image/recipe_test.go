package image

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox/store"
)

// agents are the recipes of the built-in agents, with the command each installs.
var agents = map[string]string{"codex": "codex", "claude-code": "claude", "opencode": "opencode", "gemini": "gemini", "hermes": "hermes"}

func TestAgentRecipes(t *testing.T) {
	for name, bin := range agents {
		r, ok := Recipes[name]
		if !ok {
			t.Errorf("no recipe %s", name)
			continue
		}
		args := strings.Join(MmdebstrapArgs(r, "root", "/t"), "\n")
		if !strings.Contains(args, `chroot "$1" /usr/local/bin/`+bin+` --version`) {
			t.Errorf("%s: the build does not run %s --version", name, bin)
		}
		if !strings.Contains(args, `cp -R "$BROOD_AGENT_FILES/`+name+`" "$1/opt/brood/`+name+`"`) {
			t.Errorf("%s: pins not copied in: %s", name, args)
		}
		pins, err := r.Pins()
		if err != nil || len(pins) != 1 {
			t.Errorf("%s: pins %v, %v; want one", name, pins, err)
		}
	}
	// npm installs from the lock, verifying every tarball's sha512, with no scripts.
	for _, name := range []string{"codex", "claude-code", "opencode", "gemini"} {
		args := MmdebstrapArgs(Recipes[name], "root", "/t")
		want := "--customize-hook=" + `chroot "$1" env HOME=/root NODE_EXTRA_CA_CERTS=/tmp/brood-host-ca.crt npm_config_cafile=/tmp/brood-host-ca.crt npm ci --prefix /opt/brood/` + name + ` --ignore-scripts --omit=dev --no-audit --no-fund`
		if !slices.Contains(args, want) {
			t.Errorf("%s: no hook %q in %q", name, want, args)
		}
		if i := slices.Index(args, want); i < 0 || !strings.Contains(args[i+1], "/usr/local/bin/") {
			t.Errorf("%s: the command is not linked right after npm ci", name)
		}
	}
	if got := Recipes["gemini"].Suite; got != "trixie" {
		t.Errorf("gemini suite %s, want trixie (Node >= 20)", got)
	}
	oc := strings.Join(Recipes["opencode"].Hooks, "\n")
	if !strings.Contains(oc, "find ./opt/brood/opencode/node_modules/opencode-linux-x64-baseline -type f -name opencode") ||
		!strings.Contains(oc, `rm -rf "$1/opt/brood/opencode/node_modules/opencode-linux-x64"`+"\n") {
		t.Errorf("opencode does not keep only the baseline (no AVX2) binary: %s", oc)
	}
	// Native agents keep no Node; gemini runs on it. npm goes in both cases, before the
	// --version check proves the command runs without it.
	for name, purge := range map[string]string{"codex": "npm nodejs", "claude-code": "npm nodejs", "opencode": "npm nodejs", "gemini": "npm"} {
		h := Recipes[name].Hooks
		i := slices.Index(h, `chroot "$1" apt-get purge -y --auto-remove `+purge)
		if i < 0 || !strings.HasSuffix(h[i+1], " --version") {
			t.Errorf("%s: no purge of %q right before the --version check: %q", name, purge, h)
		}
	}
}

// TestHermesRecipe checks what the hermes recipe would run: PyPI is not reachable from
// the machines this project is built on, so its image is never built here (see
// TestBuildAgentImages).
func TestHermesRecipe(t *testing.T) {
	r := Recipes["hermes"]
	want := []string{
		"--mode=root", "--variant=minbase",
		"--include=ca-certificates,git,ripgrep,procps,less,openssh-client,python3,python3-venv",
		"--dpkgopt=path-exclude=/usr/share/doc/*",
		"--dpkgopt=path-include=/usr/share/doc/*/copyright",
		"--dpkgopt=path-exclude=/usr/share/man/*",
		"--dpkgopt=path-exclude=/usr/share/locale/*",
		"--dpkgopt=path-exclude=/usr/share/info/*",
		`--customize-hook=chroot "$1" useradd --create-home --uid 1000 --user-group --shell /bin/sh agent`,
		`--customize-hook=cp /etc/ssl/certs/ca-certificates.crt "$1/tmp/brood-host-ca.crt"`,
		`--customize-hook=mkdir -p "$1/opt/brood" && cp -R "$BROOD_AGENT_FILES/hermes" "$1/opt/brood/hermes"`,
		`--customize-hook=chroot "$1" python3 -m venv /opt/brood/hermes/venv`,
		`--customize-hook=chroot "$1" env HOME=/root PIP_CERT=/tmp/brood-host-ca.crt /opt/brood/hermes/venv/bin/pip install --no-cache-dir --no-deps --require-hashes -r /opt/brood/hermes/requirements.txt`,
		`--customize-hook=ln -s /opt/brood/hermes/venv/bin/hermes "$1/usr/local/bin/hermes"`,
		`--customize-hook=chroot "$1" /usr/local/bin/hermes --version`,
		`--customize-hook=rm -rf "$1/tmp/brood-host-ca.crt" "$1/root/.npm" "$1/root/.cache"`,
		"trixie", "/t",
	}
	if got := MmdebstrapArgs(r, "root", "/t"); !slices.Equal(got, want) {
		t.Errorf("hermes args:\n%q\nwant\n%q", got, want)
	}
	pins, err := r.Pins()
	if err != nil || len(pins) != 1 || pins[0].Package != "hermes-agent" || pins[0].Version == "" {
		t.Fatalf("hermes pins %v, %v", pins, err)
	}
	// Without hashes (written where PyPI was out of reach) the build refuses to fetch.
	if pins[0].Integrity == "" {
		if _, err := Build(t.Context(), t.TempDir(), "hermes", nil); !errors.Is(err, ErrUnpinned) {
			t.Errorf("Build(hermes) with unhashed pins = %v, want ErrUnpinned", err)
		}
	}
}

// TestNpmPins checks the locks against package.json: one exact version, its sha512.
func TestNpmPins(t *testing.T) {
	pkgs := map[string]string{"codex": "@openai/codex", "claude-code": "@anthropic-ai/claude-code", "opencode": "opencode-ai", "gemini": "@google/gemini-cli"}
	for name, pkg := range pkgs {
		pins, err := Recipes[name].Pins()
		if err != nil || len(pins) != 1 || pins[0].Package != pkg || !strings.HasPrefix(pins[0].Integrity, "sha512-") ||
			strings.ContainsAny(pins[0].Version, "^~<>*x ") {
			t.Errorf("%s pins = %+v, %v; want %s at an exact version with its sha512", name, pins, err, pkg)
		}
	}
	// A lock whose entry disagrees with package.json is not a pin.
	defer func(f fs.FS) { agentFiles = f }(agentFiles)
	agentFiles = fstest.MapFS{
		"agents/x/package.json":      {Data: []byte(`{"dependencies":{"p":"1.0.1"}}`)},
		"agents/x/package-lock.json": {Data: []byte(`{"packages":{"node_modules/p":{"version":"1.0.0","integrity":"sha512-AA=="}}}`)},
	}
	if _, err := (Recipe{Name: "x", Files: "x", Registry: "npm"}).Pins(); !errors.Is(err, ErrUnpinned) {
		t.Errorf("mismatched lock: err %v, want ErrUnpinned", err)
	}
	// So is a lock with a dependency it names without a hash.
	agentFiles = fstest.MapFS{
		"agents/x/package.json":      {Data: []byte(`{"dependencies":{"p":"1.0.0"}}`)},
		"agents/x/package-lock.json": {Data: []byte(`{"packages":{"":{},"node_modules/p":{"version":"1.0.0","integrity":"sha512-AA=="},"node_modules/q":{"version":"2.0.0"}}}`)},
	}
	if _, err := (Recipe{Name: "x", Files: "x", Registry: "npm"}).Pins(); !errors.Is(err, ErrUnpinned) {
		t.Errorf("lock with an unhashed dependency: err %v, want ErrUnpinned", err)
	}
	agentFiles = fstest.MapFS{
		"agents/x/package.json":      {Data: []byte(`{"dependencies":{"p":"1.0.0"}}`)},
		"agents/x/package-lock.json": {Data: []byte(`{"packages":{"":{},"node_modules/p":{"version":"1.0.0","integrity":"sha512-AA=="}}}`)},
	}
	if pins, err := (Recipe{Name: "x", Files: "x", Registry: "npm"}).Pins(); err != nil || len(pins) != 1 || pins[0] != (Pin{"p", "1.0.0", "sha512-AA=="}) {
		t.Errorf("good lock: %v, %v", pins, err)
	}
}

// TestRecipeKey: the key follows every field and every pin file, and nothing else.
func TestRecipeKey(t *testing.T) {
	defer func(f fs.FS) { agentFiles = f }(agentFiles)
	files := fstest.MapFS{
		"agents/a/package.json":      {Data: []byte(`{"dependencies":{"p":"1.0.0"}}`)},
		"agents/a/package-lock.json": {Data: []byte(`{"packages":{"node_modules/p":{"version":"1.0.0","integrity":"sha512-AA=="}}}`)},
		"agents/b/package.json":      {Data: []byte(`{}`)},
	}
	agentFiles = files
	base := Recipe{Name: "a", Suite: "trixie", Variant: "minbase", Include: []string{"git"}, Files: "a", Registry: "npm", Hooks: []string{"true"}}
	key := func(r Recipe) string {
		t.Helper()
		k, err := r.Key()
		if err != nil || len(k) != 64 {
			t.Fatalf("Key = %q, %v", k, err)
		}
		return k
	}
	k0 := key(base)
	if k := key(base); k != k0 {
		t.Errorf("Key of the same recipe changed: %s, %s", k0, k)
	}
	files["agents/b/package.json"] = &fstest.MapFile{Data: []byte(`{"other":1}`)} // another agent's pins
	if k := key(base); k != k0 {
		t.Errorf("Key changed with another agent's pins")
	}
	mod := map[string]func(*Recipe){
		"name":     func(r *Recipe) { r.Name = "a2" },
		"suite":    func(r *Recipe) { r.Suite = "sid" },
		"variant":  func(r *Recipe) { r.Variant = "essential" },
		"include":  func(r *Recipe) { r.Include = []string{"git", "less"} },
		"hook":     func(r *Recipe) { r.Hooks = []string{"false"} },
		"registry": func(r *Recipe) { r.Registry = "pypi" },
		"files":    func(r *Recipe) { r.Files = "b" },
	}
	for what, f := range mod {
		r := base
		r.Include, r.Hooks = slices.Clone(base.Include), slices.Clone(base.Hooks)
		f(&r)
		if key(r) == k0 {
			t.Errorf("Key unchanged after changing the %s", what)
		}
	}
	for _, pin := range []string{
		`{"packages":{"node_modules/p":{"version":"1.0.1","integrity":"sha512-AA=="}}}`,
		`{"packages":{"node_modules/p":{"version":"1.0.0","integrity":"sha512-AB=="}}}`,
	} {
		files["agents/a/package-lock.json"] = &fstest.MapFile{Data: []byte(pin)}
		if key(base) == k0 {
			t.Errorf("Key unchanged with lock %s", pin)
		}
	}
	// The real recipes' keys differ from each other.
	seen := map[string]string{}
	agentFiles = embeddedAgents
	for name, r := range Recipes {
		k := key(r)
		if other, dup := seen[k]; dup {
			t.Errorf("recipes %s and %s have one key", name, other)
		}
		seen[k] = name
	}
}

// TestBuildUnchangedRecipe: building a recipe twice runs mmdebstrap once; a changed pin
// builds again, into another file. mmdebstrap is stood in for by a function that makes
// a small tree and checks it was handed the pins.
func TestBuildUnchangedRecipe(t *testing.T) {
	testenv.RequireCommand(t, "mkfs.erofs")
	defer func(f fs.FS, m func(context.Context, []string, []string, io.Writer) error) {
		agentFiles, runMmdebstrap = f, m
	}(agentFiles, runMmdebstrap)
	files := fstest.MapFS{"agents/cheap/package.json": {Data: []byte(`{}`)}}
	agentFiles = files
	runs := 0
	runMmdebstrap = func(_ context.Context, args, env []string, _ io.Writer) error {
		runs++
		var dir string
		for _, e := range env {
			if v, ok := strings.CutPrefix(e, filesEnv+"="); ok {
				dir = v
			}
		}
		pins, err := os.ReadFile(filepath.Join(dir, "cheap", "package.json"))
		if err != nil {
			return err
		}
		tree := args[len(args)-1]
		if err := os.MkdirAll(filepath.Join(tree, "etc"), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(tree, "etc", "pins"), pins, 0o644)
	}
	r := Recipe{Name: "cheap", Suite: "bookworm", Variant: "essential", Files: "cheap", Hooks: []string{"true"}}
	cache := t.TempDir()
	p1, err := buildRecipe(t.Context(), cache, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := buildRecipe(t.Context(), cache, r, nil)
	if err != nil || p2 != p1 || runs != 1 {
		t.Errorf("second build: %q, %v after %d mmdebstrap runs; want %q and 1 run", p2, err, runs, p1)
	}
	key, _ := r.Key()
	if filepath.Base(p1) != store.ImageFile("cheap", key) {
		t.Errorf("image %s is not named by the recipe key %s", p1, key)
	}
	files["agents/cheap/package.json"] = &fstest.MapFile{Data: []byte(`{"dependencies":{"p":"2"}}`)}
	p3, err := buildRecipe(t.Context(), cache, r, nil)
	if err != nil || p3 == p1 || runs != 2 {
		t.Errorf("build after a pin change: %q, %v after %d runs; want a new image and 2 runs", p3, err, runs)
	}
	for _, p := range []string{p1, p3} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("image %s: %v", p, err)
		}
	}
	if ents, _ := filepath.Glob(filepath.Join(cache, ".build-*")); len(ents) != 0 {
		t.Errorf("build work dirs left: %v", ents)
	}
}

// TestBuildAgentImages builds the agent images for real (mmdebstrap from the Debian
// archive, the agent from npm) and runs each agent's --version from the image, in a
// chroot of its fsck.erofs extraction with a /proc of its own. Minutes of CPU and hundreds of MB of downloads
// each, so it runs only with BROOD_TEST_AGENT_IMAGES set (to "all" or a comma-separated
// list of agents). hermes always skips: it installs from PyPI, which the machines this
// project is built and tested on cannot reach; where PyPI is reachable its pins must
// first be hashed by scripts/bump-agents.sh hermes.
func TestBuildAgentImages(t *testing.T) {
	which := os.Getenv("BROOD_TEST_AGENT_IMAGES")
	for _, name := range []string{"codex", "claude-code", "opencode", "gemini", "hermes"} {
		t.Run(name, func(t *testing.T) {
			if name == "hermes" {
				t.Skip("hermes installs hermes-agent from PyPI, which this machine cannot reach")
			}
			if which != "all" && !slices.Contains(strings.Split(which, ","), name) {
				t.Skipf("set BROOD_TEST_AGENT_IMAGES=%s (or all) to build the %s image for real", name, name)
			}
			testenv.RequireRoot(t)
			testenv.RequireCommand(t, "mmdebstrap")
			testenv.RequireCommand(t, "mkfs.erofs")
			fsck := testenv.RequireCommand(t, "fsck.erofs")
			unshare := testenv.RequireCommand(t, "unshare")
			cache := os.Getenv("BROOD_TEST_IMAGE_CACHE") // keep the image there
			if cache == "" {
				cache = t.TempDir()
			}
			img, err := Build(t.Context(), cache, name, testWriter{t})
			if err != nil {
				t.Fatal(err)
			}
			fi, _ := os.Stat(img)
			t.Logf("image %s: %d bytes", img, fi.Size())
			x := filepath.Join(t.TempDir(), "x")
			if out, err := exec.Command(fsck, "--extract="+x, img).CombinedOutput(); err != nil {
				t.Fatalf("fsck.erofs --extract: %v: %s", err, out)
			}
			// A /proc of its own: the native binaries read /proc/self/exe (bun aborts without).
			out, err := exec.Command(unshare, "--mount", "--pid", "--fork", "--mount-proc="+filepath.Join(x, "proc"),
				"chroot", x, "/usr/local/bin/"+agents[name], "--version").CombinedOutput()
			if err != nil || len(strings.TrimSpace(string(out))) == 0 {
				t.Errorf("%s --version in the image: %v: %q", agents[name], err, out)
			}
			t.Logf("%s --version: %s", agents[name], strings.TrimSpace(string(out)))
		})
	}
}

// testWriter sends build progress to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
