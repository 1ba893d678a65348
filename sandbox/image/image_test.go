package image

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"
)

func TestMmdebstrapArgs(t *testing.T) {
	a := MmdebstrapArgs(Recipes["test"], "root", "/c/tree")
	for _, want := range []string{"--mode=root", "--variant=essential", "--include=busybox-static,git,passwd,openssh-client", "--customize-hook=" + agentHook} {
		if !slices.Contains(a, want) {
			t.Errorf("args lack %q: %q", want, a)
		}
	}
	if !slices.Equal(a[len(a)-2:], []string{"bookworm", "/c/tree"}) {
		t.Errorf("args end %q, want suite and dir", a[len(a)-2:])
	}
	codex := strings.Join(MmdebstrapArgs(Recipes["codex"], "unshare", "/t"), " ")
	for _, want := range []string{"npm ci --prefix /opt/brood/codex", "NODE_EXTRA_CA_CERTS=", "rm -rf \"$1/tmp/brood-host-ca.crt\""} {
		if !strings.Contains(codex, want) {
			t.Errorf("codex recipe lacks %q", want)
		}
	}
	// git over SSH with --ssh-agent needs ssh in the guest, whichever image runs.
	for name, r := range Recipes {
		if !slices.Contains(r.Include, "openssh-client") {
			t.Errorf("recipe %s lacks openssh-client: %q", name, r.Include)
		}
	}
	if _, err := Build(t.Context(), t.TempDir(), "nosuch", nil); !errors.Is(err, ErrUnknownRecipe) {
		t.Errorf("Build(nosuch) err = %v, want ErrUnknownRecipe", err)
	}
}

func TestTreeDigest(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a"), []byte("one"), 0o644)
	d1, err := TreeDigest(dir)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "a"), []byte("two"), 0o644)
	d2, _ := TreeDigest(dir)
	os.Chmod(filepath.Join(dir, "a"), 0o755)
	d3, _ := TreeDigest(dir)
	os.Symlink("a", filepath.Join(dir, "l"))
	d4, _ := TreeDigest(dir)
	if d1 == d2 || d2 == d3 || d3 == d4 {
		t.Errorf("digests do not follow content, mode and links: %s %s %s %s", d1, d2, d3, d4)
	}
}

func TestFromDir(t *testing.T) {
	testenv.RequireCommand(t, "mkfs.erofs")
	fsck := testenv.RequireCommand(t, "fsck.erofs")
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(tree, "etc"), 0o755)
	os.WriteFile(filepath.Join(tree, "etc", "hello"), []byte("hello from the image\n"), 0o640)
	os.Symlink("hello", filepath.Join(tree, "etc", "link"))
	cache := filepath.Join(dir, "cache")
	img, err := FromDir(t.Context(), cache, "t", tree)
	if err != nil {
		t.Fatal(err)
	}
	x := filepath.Join(dir, "x")
	if out, err := exec.Command(fsck, "--extract="+x, img).CombinedOutput(); err != nil {
		t.Fatalf("fsck.erofs --extract: %v: %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(x, "etc", "hello"))
	if fi, _ := os.Stat(filepath.Join(x, "etc", "hello")); err != nil || string(b) != "hello from the image\n" || fi.Mode().Perm() != 0o640 {
		t.Errorf("extracted etc/hello = %q, %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(x, "etc", "link")); err != nil || l != "hello" {
		t.Errorf("extracted etc/link -> %q, %v", l, err)
	}
	fi1, _ := os.Stat(img)
	again, err := FromDir(t.Context(), cache, "t", tree)
	if fi2, _ := os.Stat(again); err != nil || again != img || !fi2.ModTime().Equal(fi1.ModTime()) {
		t.Errorf("second FromDir = %q, %v; want the cached %q untouched", again, err, img)
	}
	if got, err := Cached(cache, "t"); err != nil || got != img {
		t.Errorf("Cached = %q, %v", got, err)
	}
}
