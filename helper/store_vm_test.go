//go:build linux

package helper

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox/vmtest"
)

// TestVMStoreStateDir: with state_dir a temporary directory (root-owned, 0755),
// `broodd-helper image build test` fills it, a helper started with that configuration
// boots the image, and `brood image list` (the real client, as an allowed user) shows
// it. The kernel is hard-linked from the one vmtest fetched (apt is not what this
// tests); the initramfs and the image are built in the temporary store.
func TestVMStoreStateDir(t *testing.T) {
	a := vmtest.Get(t)
	base := publicTempDir(t)
	l := linkedStore(t, a, base)
	if err := os.RemoveAll(l.Initramfs(a.Kernel.Release)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	guest, err := vmtest.BuildGuest(ctx, filepath.Join(base, "guest"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, base, fmt.Sprintf("state_dir = %q\nallow_uids = [4242]\n", l.Root))

	// 1. Build, as root, through the helper binary's image subcommand.
	t0 := time.Now()
	build := exec.CommandContext(ctx, publicTestBinary(t), ImageSubcommand, "build", "--config", cfg, "test")
	build.Env = append(os.Environ(), childEnv+"=helper-main", "BROOD_GUEST="+guest)
	var out, log bytes.Buffer
	build.Stdout, build.Stderr = &out, &log
	if err := build.Run(); err != nil {
		t.Fatalf("broodd-helper image build test: %v\n%s", err, log.String())
	}
	imgs, err := l.ListImages()
	if err != nil || len(imgs) != 1 || imgs[0].Name != "test" {
		t.Fatalf("store after the build: %+v, %v\n%s", imgs, err, log.String())
	}
	if f := strings.Fields(out.String()); len(f) != 3 || f[0] != "test" || f[1] != filepath.Join(l.Images(), imgs[0].File) {
		t.Errorf("build printed %q, want test %s SIZE", out.String(), filepath.Join(l.Images(), imgs[0].File))
	}
	t.Logf("image build into %s: %s", l.Root, time.Since(t0).Round(time.Second))

	// 2. A helper with that state_dir (and nothing pinned) boots it.
	h := startStoreHelper(t, cfg, base)
	c, id := bootImage(t, h, base, "test", "test image")
	// The VMM holds the image of the temporary store, not one of the default store.
	_, vmm := findVMM(t, h.runtime, id)
	img := filepath.Join(l.Images(), imgs[0].File)
	if !slices.Contains(slices.Collect(maps.Values(readProc(t, vmm).fds)), img) {
		t.Errorf("the VMM has no descriptor of %s: %v", img, readProc(t, vmm).fds)
	}
	c.must(vmCmd{Op: "close"})
	if ex := c.must(vmCmd{Op: "wait", ID: id}); ex.Exit.Outcome != api.OutcomePoweroff {
		t.Errorf("wait_vm = %+v, want poweroff", ex.Exit)
	}
	c.must(vmCmd{Op: "destroy", ID: id})

	// 3. brood image list, the real client as uid 4242, shows the image and this store.
	brood := filepath.Join(base, "brood")
	_, self, _, _ := runtime.Caller(0)
	gobuild := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", brood, "./cmd/brood")
	gobuild.Dir = filepath.Dir(filepath.Dir(self))
	if o, err := gobuild.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/brood: %v: %s", err, o)
	}
	list := exec.CommandContext(ctx, brood, "image", "list")
	list.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + base, "BROOD_HELPER_SOCKET=" + h.sock}
	list.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242, Groups: []uint32{}}}
	var lout, lerr bytes.Buffer
	list.Stdout, list.Stderr = &lout, &lerr
	if err := list.Run(); err != nil {
		t.Fatalf("brood image list: %v\n%s%s", err, lout.String(), lerr.String())
	}
	var line string
	for _, ln := range strings.Split(lout.String(), "\n") {
		if strings.HasPrefix(ln, "test ") {
			line = ln
		}
	}
	if !strings.Contains(line, imgs[0].Digest) || strings.Contains(line, "not built") || !strings.Contains(lerr.String(), l.Root) {
		t.Errorf("brood image list:\n%s%s\nwant test with digest %s from %s", lout.String(), lerr.String(), imgs[0].Digest, l.Root)
	}
}
