package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// RunnerFiles returns, opened read-only and in this order, what a test hands a VM runner
// after its control socket: the directories share and run, then regular files vmlinux,
// initrd and image written into dir (mode 0644, each holding its own name) for the kernel,
// initramfs and rootfs image. The caller closes them (usually once a child holds them).
func RunnerFiles(t testing.TB, share, run, dir string) []*os.File {
	t.Helper()
	var files []*os.File
	for _, p := range []string{share, run} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	for _, n := range []string{"vmlinux", "initrd", "image"} {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}
