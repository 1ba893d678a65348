//go:build linux

package helper

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox"
	"brood.dev/brood/sandbox/store"
)

// artifactTree builds a state dir with one kernel, one initramfs and one image, all
// root-owned and 0644/0755, and returns it.
func artifactTree(t *testing.T) string {
	t.Helper()
	requireRoot(t)
	state := filepath.Join(t.TempDir(), "state")
	rel := filepath.Join(state, store.KernelsDir, "6.1.0-57-amd64")
	for _, d := range []string{filepath.Join(rel, store.InitramfsDir), filepath.Join(state, store.ImagesDir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// t.TempDir's own directories are 0700 root: fine (root-owned, not writable by others).
	for p, data := range map[string]string{
		filepath.Join(rel, store.VmlinuxName): "kernel",
		filepath.Join(rel, store.ReadyName):   "pkg\n",
		filepath.Join(rel, store.InitramfsDir, "initramfs-0123456789abcdef0123456789abcdef.cpio.gz"):  "initrd",
		filepath.Join(state, store.ImagesDir, "test-0123456789abcdef0123456789abcdef"+store.ImageExt): "image",
	} {
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return state
}

func artifactCfg(state string) *Config {
	cfg := DefaultConfig()
	cfg.StateDir = state
	return &cfg
}

// TestOpenArtifacts: root-owned artifacts open; a symlinked image, an image owned by a
// user, a group-writable directory, a missing image and a malformed name are refused.
func TestOpenArtifacts(t *testing.T) {
	state := artifactTree(t)
	a, err := openArtifacts(artifactCfg(state), "test")
	if err != nil {
		t.Fatalf("openArtifacts: %v", err)
	}
	b := make([]byte, 16)
	n, _ := a.Image.Read(b)
	if string(b[:n]) != "image" || a.Release != "6.1.0-57-amd64" {
		t.Errorf("image %q release %q", b[:n], a.Release)
	}
	a.Close()
	if c := artifactsCheck(artifactCfg(state)); !c.OK || !strings.Contains(c.Detail, "kernel 6.1.0-57-amd64") || !strings.Contains(c.Detail, "test-0123") {
		t.Errorf("doctor check = %+v", c)
	}

	img := filepath.Join(state, store.ImagesDir, "test-0123456789abcdef0123456789abcdef"+store.ImageExt)
	other := filepath.Join(state, store.ImagesDir, "other-0123456789abcdef0123456789abcdef"+store.ImageExt)
	if err := os.WriteFile(other, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		image   string
		mutate  func()
		restore func()
		want    error
	}{
		{"symlink", "test", func() { os.Rename(img, img+".real"); os.Symlink(img+".real", img) },
			func() { os.Remove(img); os.Rename(img+".real", img) }, ErrUnsafeArtifact},
		{"user-owned", "test", func() { os.Chown(img, 4242, 4242) }, func() { os.Chown(img, 0, 0) }, ErrUnsafeArtifact},
		{"group-writable image", "test", func() { os.Chmod(img, 0o664) }, func() { os.Chmod(img, 0o644) }, ErrUnsafeArtifact},
		{"world-writable images dir", "test", func() { os.Chmod(filepath.Dir(img), 0o777) }, func() { os.Chmod(filepath.Dir(img), 0o755) }, ErrUnsafeArtifact},
		{"user-owned kernel dir", "test", func() { os.Chown(filepath.Join(state, store.KernelsDir), 4242, 0) },
			func() { os.Chown(filepath.Join(state, store.KernelsDir), 0, 0) }, ErrUnsafeArtifact},
		{"missing image", "codex", func() {}, func() {}, api.ErrUnavailable},
		{"path as name", "../test", func() {}, func() {}, api.ErrBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.mutate()
			defer tc.restore()
			a, err := openArtifacts(artifactCfg(state), tc.image)
			if err == nil {
				a.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("openArtifacts = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestProbeHostQEMU: with QEMU installed, Hello and Doctor report the backend's real
// accelerator and its reason, and the runner gets an absolute QEMU path.
func TestProbeHostQEMU(t *testing.T) {
	cfg := DefaultConfig()
	caps, checks, vmh := ProbeHost(&cfg, api.Landlock{Mode: api.LandlockOff})
	if _, err := lookQEMU(); err != nil {
		if vmh.VMM != "" || len(caps.Backends) != 0 {
			t.Errorf("no QEMU but caps %+v vmhost %+v", caps, vmh)
		}
		return
	}
	if !filepath.IsAbs(vmh.VMM) || len(caps.Backends) != 1 || caps.Backends[0] != "qemu" || caps.Accel != vmh.Accel {
		t.Errorf("caps %+v vmhost %+v", caps, vmh)
	}
	var accel *api.Check
	for i := range checks {
		if checks[i].Name == "accel" {
			accel = &checks[i]
		}
	}
	if accel == nil || !strings.HasPrefix(accel.Detail, string(caps.Accel)+": ") || !accel.OK || accel.Warn != (caps.Accel == sandbox.AccelTCG) {
		t.Errorf("accel check %+v for accel %s", accel, caps.Accel)
	}
	if caps.Accel == sandbox.AccelTCG && (vmh.Warning == "" || !strings.Contains(accel.Detail, "WARNING")) {
		t.Errorf("TCG without a warning: %+v %+v", vmh, accel)
	}
}
