// Package image makes the guest's read-only root filesystem images: a directory tree
// turned into an ext4 image with `mke2fs -d` (no mount, no loop device, no root needed),
// cached by the tree's content digest, and recipes that build such trees from Debian
// packages with mmdebstrap (`test` for CI, `codex` for the Codex agent).
//
// The guest mounts the image read-only under a tmpfs overlay, so nothing ever writes to
// it; it has no journal.
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
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// SystemCacheDir is the root-owned image cache (the helper only boots images from here).
const SystemCacheDir = "/var/lib/brood/images"

// CacheDir returns where images are cached: SystemCacheDir for root, else
// $XDG_CACHE_HOME/brood/images.
func CacheDir() (string, error) {
	if os.Geteuid() == 0 {
		return SystemCacheDir, nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find image cache dir: %w", err)
	}
	return filepath.Join(c, "brood", "images"), nil
}

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

// treeUsage returns the tree's apparent size in bytes and entry count.
func treeUsage(root string) (size int64, n int64, err error) {
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n++
		if fi, err := d.Info(); err == nil && fi.Mode().IsRegular() {
			size += (fi.Size() + 4095) &^ 4095
		}
		return nil
	})
	return size, n, err
}

// Mke2fsArgs returns mke2fs's arguments for an ext4 image of sizeKiB holding inodes
// entries, populated from dir: no journal (the image is never written in the guest),
// a label, and root-owned top directory.
func Mke2fsArgs(dir, out, label string, sizeKiB, inodes int64) []string {
	return []string{
		"-t", "ext4", "-q", "-F",
		"-O", "^has_journal",
		"-L", label,
		"-N", fmt.Sprint(inodes),
		"-E", "root_owner=0:0",
		"-d", dir,
		out, fmt.Sprintf("%dk", sizeKiB),
	}
}

// FromDir returns the path of the ext4 image of dir under cacheDir, named
// <name>-<digest>.ext4; it runs mke2fs only when that image is missing.
func FromDir(ctx context.Context, cacheDir, name, dir string) (string, error) {
	digest, err := TreeDigest(dir)
	if err != nil {
		return "", err
	}
	out := filepath.Join(cacheDir, name+"-"+digest[:32]+".ext4")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	size, n, err := treeUsage(dir)
	if err != nil {
		return "", fmt.Errorf("measure tree %s: %w", dir, err)
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("create image cache: %w", err)
	}
	tmp := out + ".tmp"
	// Headroom for ext4 metadata: 20% + 32 MiB; inodes: entries + 10% + 1024.
	sizeKiB := (size/1024)*12/10 + 32<<10
	inodes := n + n/10 + 1024
	cmd := exec.CommandContext(ctx, "mke2fs", Mke2fsArgs(dir, tmp, "brood-"+name, sizeKiB, inodes)...)
	if o, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("mke2fs image %s: %w: %s", name, err, bytes.TrimSpace(o))
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

// Recipes are the built-in images.
//
//   - test: Essential packages + busybox-static + git, ~30 s to build; CI boots it.
//   - codex: minbase + Debian's nodejs/npm + `npm install -g @openai/codex`. npm runs
//     in the chroot trusting the host's CA bundle (copied in for the install and
//     removed after): package registries may sit behind a TLS-intercepting proxy whose
//     CA only the host trusts (LAB.md 9).
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
	cmd := exec.CommandContext(ctx, "mmdebstrap", MmdebstrapArgs(r, mode, tree)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("mmdebstrap image %s: %w", name, err)
	}
	return FromDir(ctx, cacheDir, name, tree)
}

// Cached returns the newest cached image called name, or fs.ErrNotExist.
func Cached(cacheDir, name string) (string, error) {
	m, _ := filepath.Glob(filepath.Join(cacheDir, name+"-*.ext4"))
	var best string
	var bestT int64
	for _, p := range m {
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
func Ensure(ctx context.Context, cacheDir, name string, log io.Writer) (string, error) {
	if p, err := Cached(cacheDir, name); err == nil {
		return p, nil
	}
	return Build(ctx, cacheDir, name, log)
}
