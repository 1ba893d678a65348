// Package vmtest prepares what a real-VM (tier 3) test boots: the guest kernel, a base
// initramfs with a freshly built brood-guest, and the `test` rootfs image, each built
// once per test process and cached like production does (in the default artifact store,
// package store). Tests call RequireVM first: it skips locally and fails in CI
// when root or a needed tool is missing.
//
// Privilege: tests only; it builds into the root-owned store, so its tests run as root
// and are gated by testenv.
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
	"brood.dev/brood/sandbox/assets"
)

var (
	once     sync.Once
	shared   *assets.Set
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
func Get(t testing.TB) *assets.Set {
	t.Helper()
	RequireVM(t)
	once.Do(func() { shared, setupErr = build() })
	if setupErr != nil {
		t.Fatalf("prepare VM assets: %v", setupErr)
	}
	return shared
}

func build() (*assets.Set, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	guest, err := BuildGuest(ctx, filepath.Join(os.TempDir(), fmt.Sprintf("brood-vmtest-%d", os.Getpid())))
	if err != nil {
		return nil, err
	}
	return assets.Ensure(ctx, assets.Options{Guest: guest, Image: "test", BuildImage: true})
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
