// Package vmtest prepares what a real-VM (tier 3) test boots: the guest kernel, a base
// initramfs with a freshly built brood-guest, and the `test` rootfs image, each built
// once per test process and cached like production does (kernel and images under
// /var/lib/brood for root). Tests call RequireVM first: it skips locally and fails in CI
// when root or a needed tool is missing.
package vmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox/image"
	"brood.dev/brood/sandbox/initramfs"
	"brood.dev/brood/sandbox/kernel"
)

// Assets are the host files a test VM boots from.
type Assets struct {
	Kernel    *kernel.Kernel
	BaseInitr string // base initramfs (no session config)
	Image     string // the `test` rootfs image
}

var (
	once     sync.Once
	assets   *Assets
	setupErr error
)

// RequireVM skips (fails in CI) unless the test can boot VMs: root, QEMU, and the tools
// that fetch the kernel and build the image.
func RequireVM(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t)
	for _, c := range []string{"qemu-system-x86_64", "apt-get", "dpkg-deb", "depmod", "xz", "mmdebstrap", "mkfs.erofs"} {
		testenv.RequireCommand(t, c)
	}
}

// Get returns the shared assets, building them on first use (first run on a fresh
// machine: ~15 s kernel, ~30 s image).
func Get(t testing.TB) *Assets {
	t.Helper()
	RequireVM(t)
	once.Do(func() { assets, setupErr = build() })
	if setupErr != nil {
		t.Fatalf("prepare VM assets: %v", setupErr)
	}
	return assets
}

func build() (*Assets, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	kdir, err := kernel.CacheDir()
	if err != nil {
		return nil, err
	}
	k, err := kernel.Fetch(ctx, kdir, "")
	if err != nil {
		return nil, err
	}
	guest, err := BuildGuest(ctx, filepath.Join(os.TempDir(), fmt.Sprintf("brood-vmtest-%d", os.Getpid())))
	if err != nil {
		return nil, err
	}
	base, err := initramfs.Build(filepath.Join(k.Dir, "initramfs"), initramfs.Options{
		Release: k.Release, ModulesDir: k.ModulesDir, Guest: guest,
	})
	if err != nil {
		return nil, err
	}
	idir, err := image.CacheDir()
	if err != nil {
		return nil, err
	}
	img, err := image.Ensure(ctx, idir, "test", nil)
	if err != nil {
		return nil, err
	}
	return &Assets{Kernel: k, BaseInitr: base, Image: img}, nil
}

// BuildGuest builds cmd/brood-guest static (CGO_ENABLED=0) into dir and returns its path.
func BuildGuest(ctx context.Context, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	out := filepath.Join(dir, "brood-guest")
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-ldflags=-s", "-o", out, "./cmd/brood-guest")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if o, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build brood-guest: %w: %s", err, o)
	}
	return out, nil
}
