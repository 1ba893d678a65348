// Package image makes the guest's read-only root filesystem images: a directory tree
// turned into an uncompressed EROFS image with mkfs.erofs (no mount, no loop device, no
// root needed), cached by the tree's content digest, and recipes that build such trees
// from Debian packages with mmdebstrap (`test` for CI, `codex` for the Codex agent).
//
// The guest mounts the image read-only under a tmpfs overlay. EROFS rather than ext4:
// the image is never written, and the guest loads the 0.24 MB erofs module instead of
// ext4 + jbd2 + mbcache + crc16 (2.4 MB), which under TCG saves ~0.3 s of every boot
// (ext4.ko alone took 254 ms to load).
//
// Privilege: building into the artifact store needs root (mmdebstrap in root mode, the
// root-owned store); linked only into broodd-helper and tests, never into brood.
package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/hostexec"
	"brood.dev/brood/sandbox/store"
)

// TreeDigest hashes a directory tree: every entry's relative path, type, permission
// bits, owner, size and content (or symlink target), in lexical walk order. Hex SHA-256.
func TreeDigest(root string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "brood-tree-v1\n")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var uid, gid uint32
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = st.Uid, st.Gid
		}
		fmt.Fprintf(h, "%q %v %d:%d %d\n", rel, fi.Mode(), uid, gid, fi.Size())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "-> %q\n", t)
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("digest tree %s: %w", root, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// MkfsArgs returns mkfs.erofs's arguments for an uncompressed image of dir at out,
// with owners and permissions kept as they are in dir.
func MkfsArgs(dir, out string) []string {
	return []string{"--quiet", out, dir}
}

// FromDir returns the path of the image of dir under cacheDir (a store.Layout's
// Images()), named store.ImageFile(name, digest); it runs mkfs.erofs only when that image
// is missing.
func FromDir(ctx context.Context, cacheDir, name, dir string) (string, error) {
	digest, err := TreeDigest(dir)
	if err != nil {
		return "", err
	}
	if !store.ValidImageName(name) {
		return "", fmt.Errorf("image %q: not an image name: %w", name, ErrUnknownRecipe)
	}
	out := filepath.Join(cacheDir, store.ImageFile(name, digest))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("create image cache: %w", err)
	}
	tmp := out + ".tmp"
	cmd, err := hostexec.Command(ctx, "mkfs.erofs", MkfsArgs(dir, tmp)...)
	if err != nil {
		return "", fmt.Errorf("mkfs.erofs image %s: %w", name, err)
	}
	if o, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("mkfs.erofs image %s: %w: %s", name, err, bytes.TrimSpace(o))
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("store image %s: %w", name, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("store image %s: %w", name, err)
	}
	return out, nil
}

// Recipe builds an image's tree from Debian packages with mmdebstrap.
type Recipe struct {
	Name    string
	Suite   string   // Debian suite, e.g. "bookworm"
	Variant string   // mmdebstrap variant: "essential", "minbase", ...
	Include []string // extra packages
	// Hooks are shell commands mmdebstrap runs after installing ("$1" is the tree);
	// they run on the host as the builder, with the tree at "$1".
	Hooks []string
}

// agentHook creates the unprivileged agent user (uid/gid 1000) brood-guest runs as.
const agentHook = `chroot "$1" useradd --create-home --uid 1000 --user-group --shell /bin/sh agent`

// excludeDocs drops documentation, man pages and translations (dpkg path-exclude).
var excludeDocs = []string{
	"--dpkgopt=path-exclude=/usr/share/doc/*",
	"--dpkgopt=path-include=/usr/share/doc/*/copyright",
	"--dpkgopt=path-exclude=/usr/share/man/*",
	"--dpkgopt=path-exclude=/usr/share/locale/*",
	"--dpkgopt=path-exclude=/usr/share/info/*",
}

// codexStaticHook points /usr/local/bin/codex at the static musl binary that
// @openai/codex ships in its platform package, bypassing the Node launcher: under TCG
// Node's start-up alone costs ~2.5 s per run (measured on a 2-core TCG host). Without
// that binary the launcher stays.
const codexStaticHook = `chroot "$1" sh -c 'b=$(ls /usr/local/lib/node_modules/@openai/codex/node_modules/@openai/codex-linux-*/vendor/*-unknown-linux-musl/bin/codex 2>/dev/null | head -n1); [ -z "$b" ] || ln -sf "$b" /usr/local/bin/codex'`

// Recipes are the built-in images.
//
//   - test: Essential packages + busybox-static + git, ~30 s to build; CI boots it.
//   - codex: minbase + Debian's nodejs/npm + `npm install -g @openai/codex`, with
//     `codex` linked to the package's static binary. npm runs
//     in the chroot trusting the host's CA bundle (copied in for the install and
//     removed after): package registries may sit behind a TLS-intercepting proxy whose
//     CA only the host trusts.
var Recipes = map[string]Recipe{
	"test": {
		Name: "test", Suite: "bookworm", Variant: "essential",
		Include: []string{"busybox-static", "git", "passwd"},
		Hooks:   []string{agentHook},
	},
	"codex": {
		Name: "codex", Suite: "bookworm", Variant: "minbase",
		Include: []string{"ca-certificates", "git", "ripgrep", "procps", "less", "nodejs", "npm"},
		Hooks: []string{
			agentHook,
			`cp /etc/ssl/certs/ca-certificates.crt "$1/tmp/brood-host-ca.crt"`,
			`chroot "$1" env HOME=/root NODE_EXTRA_CA_CERTS=/tmp/brood-host-ca.crt npm_config_cafile=/tmp/brood-host-ca.crt npm install -g @openai/codex`,
			codexStaticHook,
			`rm -rf "$1/tmp/brood-host-ca.crt" "$1/root/.npm"`,
		},
	},
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

// Build builds the image called name from its recipe and returns its path in cacheDir.
// The tree is made in a temporary directory under cacheDir and removed afterwards;
// progress goes to log (may be nil). An unchanged tree reuses the cached image.
func Build(ctx context.Context, cacheDir, name string, log io.Writer) (string, error) {
	r, ok := Recipes[name]
	if !ok {
		return "", fmt.Errorf("image %q: %w", name, ErrUnknownRecipe)
	}
	if log == nil {
		log = io.Discard
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("create image cache: %w", err)
	}
	work, err := os.MkdirTemp(cacheDir, ".build-"+name+"-")
	if err != nil {
		return "", fmt.Errorf("build image %s: %w", name, err)
	}
	defer os.RemoveAll(work)
	mode := "unshare"
	if os.Geteuid() == 0 {
		mode = "root"
	}
	tree := filepath.Join(work, "rootfs")
	cmd, err := hostexec.Command(ctx, "mmdebstrap", MmdebstrapArgs(r, mode, tree)...)
	if err != nil {
		return "", fmt.Errorf("mmdebstrap image %s: %w", name, err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("mmdebstrap image %s: %w", name, err)
	}
	return FromDir(ctx, cacheDir, name, tree)
}

// Cached returns the newest cached image called name, or fs.ErrNotExist.
func Cached(cacheDir, name string) (string, error) {
	m, _ := filepath.Glob(filepath.Join(cacheDir, name+"-*"+store.ImageExt))
	var best string
	var bestT int64
	for _, p := range m {
		if n, _, ok := store.ParseImageFile(filepath.Base(p)); !ok || n != name {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.ModTime().UnixNano() > bestT {
			best, bestT = p, fi.ModTime().UnixNano()
		}
	}
	if best == "" {
		return "", fmt.Errorf("image %s in %s: %w", name, cacheDir, fs.ErrNotExist)
	}
	return best, nil
}

// Ensure returns the cached image called name, building it first when there is none.
// Concurrent callers (several test binaries, say) wait for one build instead of each
// running mmdebstrap.
func Ensure(ctx context.Context, cacheDir, name string, log io.Writer) (string, error) {
	if p, err := Cached(cacheDir, name); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("create image cache: %w", err)
	}
	lockPath := filepath.Join(cacheDir, ".lock-"+name)
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return "", fmt.Errorf("open image lock: %w", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return "", &os.PathError{Op: "flock", Path: lockPath, Err: err}
	}
	if p, err := Cached(cacheDir, name); err == nil { // built while we waited
		return p, nil
	}
	return Build(ctx, cacheDir, name, log)
}
