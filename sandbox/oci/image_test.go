package oci

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox/ociref"
	"brood.dev/brood/sandbox/store"
)

// Pull into the store: the image file is named by the pulled digest, holds the tree
// with its owners, and no work directory is left.
func TestPullImage(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "mkfs.erofs")
	fsck := testenv.RequireCommand(t, "fsck.erofs")
	rg := newRegistry(t)
	layers := rootfsLayers(t)
	owned := reg("home/agent/.profile", "PS1=$\n")
	owned.uid = 123456
	layers = append(layers, layerTar(t, owned))
	d := push(t, rg.host+"/test:v1", testImage(t, runtime.GOARCH, layers...))

	images := store.New(t.TempDir()).Images()
	path, p, err := PullImage(t.Context(), rg.host+"/test@"+d.String(), images, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ociref.ImageName(d.String())
	if n, _, ok := store.ParseImageFile(filepath.Base(path)); !ok || n != want || filepath.Dir(path) != images {
		t.Fatalf("image %s; want %s/%s-<tree digest>%s", path, images, want, store.ImageExt)
	}
	if p.Digest != d.String() {
		t.Errorf("digest %s, want %s", p.Digest, d)
	}
	if n, err := ociref.RefImageName(p.Pinned()); err != nil || n != want {
		t.Errorf("RefImageName(%s) = %q, %v; want %q", p.Pinned(), n, err, want)
	}
	if _, err := ociref.RefImageName(rg.host + "/test:v1"); err == nil {
		t.Errorf("RefImageName of a tag gave a name")
	}
	x := filepath.Join(t.TempDir(), "x")
	if out, err := exec.Command(fsck, "--extract="+x, path).CombinedOutput(); err != nil {
		t.Fatalf("fsck.erofs --extract: %v: %s", err, out)
	}
	checkRootfs(t, x)
	fi, err := os.Stat(filepath.Join(x, "home/agent/.profile"))
	if err != nil || fi.Sys().(*syscall.Stat_t).Uid != 123456 {
		t.Errorf("home/agent/.profile: %v, %v; want uid 123456 kept in the image", fi, err)
	}
	again, _, err := PullImage(t.Context(), rg.host+"/test:v1", images, Options{})
	if err != nil || again != path {
		t.Errorf("second pull by tag: %s, %v; want the same image %s", again, err, path)
	}
	ents, _ := os.ReadDir(images)
	if len(ents) != 1 {
		t.Errorf("images dir holds %d entries, want only the image: %v", len(ents), ents)
	}
}
