package vmhost

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/runner"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox"
)

func TestParseClientKey(t *testing.T) {
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBcjnV6TRq0Wd4bS3BT9fxoRVa0CxpWIy5mQwGDC5vIm"
	if got, err := parseClientKey(key + " user@host\n"); err != nil || got != key {
		t.Errorf("parseClientKey = %q, %v", got, err)
	}
	for _, bad := range []string{"", "ssh-ed25519", "not a key", `command="sh" ` + key, key + "\n" + key} {
		if _, err := parseClientKey(bad); !errors.Is(err, api.ErrBadRequest) {
			t.Errorf("parseClientKey(%q) = %v, want bad_request", bad, err)
		}
	}
}

func TestVMLimits(t *testing.T) {
	vmLimits := func(a api.StartVMArgs, h Resources) (int, int, time.Duration, error) {
		s, err := sizesFor(a, h)
		return s.CPUs, s.MemoryMiB, s.Timeout, err
	}
	cpus, mem, timeout, err := vmLimits(api.StartVMArgs{}, Resources{})
	if err != nil || cpus != sandbox.DefaultCPUs || mem != sandbox.DefaultMemoryMiB || timeout != sandbox.DefaultTimeout {
		t.Errorf("defaults = %d %d %v %v", cpus, mem, timeout, err)
	}
	for _, a := range []api.StartVMArgs{
		{CPUs: -1}, {CPUs: sandbox.MaxCPUs + 1}, {MemoryMiB: 64}, {TimeoutSec: -1},
		{TimeoutSec: int(sandbox.DefaultTimeout.Seconds()) + 1},
	} {
		if _, _, _, err := vmLimits(a, Resources{CPUs: 2, MemoryMiB: 4096}); !errors.Is(err, api.ErrBadRequest) {
			t.Errorf("vmLimits(%+v) = %v, want bad_request", a, err)
		}
	}
	// Within the sandbox limits but above the host's: a typed host_resources error.
	host := Resources{CPUs: 2, MemoryMiB: 4096}
	for _, a := range []api.StartVMArgs{{CPUs: 3}, {CPUs: sandbox.MaxCPUs}, {MemoryMiB: 4097}} {
		if _, _, _, err := vmLimits(a, host); !errors.Is(err, api.ErrHostResources) {
			t.Errorf("vmLimits(%+v, %+v) = %v, want host_resources", a, host, err)
		}
	}
	if cpus, mem, _, err := vmLimits(api.StartVMArgs{CPUs: 2, MemoryMiB: 4096}, host); err != nil || cpus != 2 || mem != 4096 {
		t.Errorf("at the host's limits: %d %d %v", cpus, mem, err)
	}
	// The default never asks for more vCPUs than the host has.
	if cpus, _, _, err := vmLimits(api.StartVMArgs{}, Resources{CPUs: 1}); err != nil || cpus != min(sandbox.DefaultCPUs, 1) {
		t.Errorf("default on a 1-CPU host: %d %v", cpus, err)
	}
	if h := HostResources(); h.CPUs < 1 || h.MemoryMiB < 64 {
		t.Errorf("HostResources() = %+v", h)
	}
}

// TestCleanupRunDirs: run dirs a crashed helper left, owned by their users and holding
// sockets, files and subdirectories, are removed; a symlink inside is not followed.
func TestCleanupRunDirs(t *testing.T) {
	testenv.RequireRoot(t)
	runtime := t.TempDir()
	outside := filepath.Join(t.TempDir(), "keep")
	if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(runtime, RunParent, "0badc0de")
	if err := os.MkdirAll(filepath.Join(d, "sub", "deeper"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(d), 0o755) // as the helper makes it (EnsureDir): owners remove their run dirs through it
	ln, err := net.Listen("unix", filepath.Join(d, runner.SSHSocketName))
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	os.WriteFile(filepath.Join(d, "sub", "f"), []byte("x"), 0o400)
	os.Symlink(filepath.Dir(outside), filepath.Join(d, "sub", "link"))
	for _, p := range []string{filepath.Join(d, "sub", "deeper"), filepath.Join(d, "sub"), d} {
		os.Chown(p, 4242, 4242)
		os.Chmod(p, 0o700)
	}
	got, left, err := CleanupRunDirs(runtime)
	if err != nil || left != nil || len(got) != 1 || got[0] != "0badc0de" {
		t.Errorf("CleanupRunDirs = %v, %v, %v", got, left, err)
	}
	if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run dir still there: %v", err)
	}
	if b, err := os.ReadFile(outside); string(b) != "keep" {
		t.Errorf("file behind a symlink: %q, %v", b, err)
	}
	if got, _, err := CleanupRunDirs(filepath.Join(runtime, "none")); err != nil || len(got) != 0 {
		t.Errorf("CleanupRunDirs without run dirs = %v, %v", got, err)
	}
}
