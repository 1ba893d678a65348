// Package image makes the guest's read-only root filesystem images: a directory tree
// turned into an uncompressed EROFS image with mkfs.erofs (no mount, no loop device, no
// root needed), and recipes that build such trees from Debian packages with mmdebstrap
// plus, for the agents (codex, claude-code, opencode, gemini, hermes), their package
// from npm or PyPI pinned by version and hash (agents/, rewritten by
// scripts/bump-agents.sh). A recipe's image is named by the recipe's own digest
// (Recipe.Key): an unchanged recipe is not rebuilt. FromDir names an image by its tree's
// digest instead.
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
	return out, mkfs(ctx, name, dir, out)
}

// mkfs packs dir into the image file out (through out.tmp, renamed when complete, mode
// 0644), creating out's directory. It returns mkfs.erofs's error with its output.
func mkfs(ctx context.Context, name, dir, out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("create image cache: %w", err)
	}
	tmp := out + ".tmp"
	cmd, err := hostexec.Command(ctx, "mkfs.erofs", MkfsArgs(dir, tmp)...)
	if err != nil {
		return fmt.Errorf("mkfs.erofs image %s: %w", name, err)
	}
	if o, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("mkfs.erofs image %s: %w: %s", name, err, bytes.TrimSpace(o))
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("store image %s: %w", name, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("store image %s: %w", name, err)
	}
	return nil
}

// Build builds the image called name from its recipe and returns its path in cacheDir,
// named store.ImageFile(name, recipe.Key()): when that file exists the recipe is
// unchanged and nothing runs. Otherwise the tree is made in a temporary directory under
// cacheDir (removed afterwards) and packed with mkfs.erofs; progress goes to log (may be
// nil). Errors: ErrUnknownRecipe, ErrUnpinned (an agent pin without a hash), or the
// failing step's.
func Build(ctx context.Context, cacheDir, name string, log io.Writer) (string, error) {
	r, ok := Recipes[name]
	if !ok {
		return "", fmt.Errorf("image %q: %w", name, ErrUnknownRecipe)
	}
	return buildRecipe(ctx, cacheDir, r, log)
}

// buildRecipe is Build for a recipe value.
func buildRecipe(ctx context.Context, cacheDir string, r Recipe, log io.Writer) (string, error) {
	if log == nil {
		log = io.Discard
	}
	out, err := recipeImage(cacheDir, r)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(out); err == nil {
		fmt.Fprintf(log, "image %s: recipe unchanged, %s is up to date\n", r.Name, filepath.Base(out))
		return out, nil
	}
	if err := r.checkPinned(); err != nil {
		return "", err
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("create image cache: %w", err)
	}
	work, err := os.MkdirTemp(cacheDir, ".build-"+r.Name+"-")
	if err != nil {
		return "", fmt.Errorf("build image %s: %w", r.Name, err)
	}
	defer os.RemoveAll(work)
	files := filepath.Join(work, "files")
	if err := os.CopyFS(files, agentFiles); err != nil {
		return "", fmt.Errorf("build image %s: copy pins: %w", r.Name, err)
	}
	mode := "unshare"
	if os.Geteuid() == 0 {
		mode = "root"
	}
	tree := filepath.Join(work, "rootfs")
	env := append(os.Environ(), filesEnv+"="+filepath.Join(files, "agents"))
	if err := runMmdebstrap(ctx, MmdebstrapArgs(r, mode, tree), env, log); err != nil {
		return "", fmt.Errorf("mmdebstrap image %s: %w", r.Name, err)
	}
	return out, mkfs(ctx, r.Name, tree, out)
}

// recipeImage is the path of r's image in cacheDir.
func recipeImage(cacheDir string, r Recipe) (string, error) {
	if !store.ValidImageName(r.Name) {
		return "", fmt.Errorf("image %q: not an image name: %w", r.Name, ErrUnknownRecipe)
	}
	key, err := r.Key()
	if err != nil {
		return "", err
	}
	return filepath.Join(cacheDir, store.ImageFile(r.Name, key)), nil
}

// runMmdebstrap runs mmdebstrap with args and env, output to log. A variable: tests
// count the runs and stand in for it.
var runMmdebstrap = func(ctx context.Context, args, env []string, log io.Writer) error {
	cmd, err := hostexec.Command(ctx, "mmdebstrap", args...)
	if err != nil {
		return err
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	return cmd.Run()
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

// Ensure returns the image of name's recipe as it is now (Build's file), building it
// first when it is missing. Concurrent callers (several test binaries, say) wait for one
// build instead of each running mmdebstrap. Errors are Build's.
func Ensure(ctx context.Context, cacheDir, name string, log io.Writer) (string, error) {
	r, ok := Recipes[name]
	if !ok {
		return "", fmt.Errorf("image %q: %w", name, ErrUnknownRecipe)
	}
	out, err := recipeImage(cacheDir, r)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(out); err == nil {
		return out, nil
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
	return buildRecipe(ctx, cacheDir, r, log) // returns at once if built while we waited
}
