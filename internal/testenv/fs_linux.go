package testenv

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MountLoop makes a filesystem image of size bytes with the command mkfs (e.g.
// "mkfs.ext4") and mkfsArgs in a temp dir, mounts it with -o loop (plus ",opts" when opts
// is not empty, e.g. "user_xattr,acl") and returns the mount point, which is unmounted
// when the test ends. It needs root and the commands (RequireRoot, RequireCommand); a
// kernel that refuses the mount is a Skip (a failure in CI).
func MountLoop(t testing.TB, mkfs string, size int64, opts string, mkfsArgs ...string) string {
	t.Helper()
	RequireRoot(t)
	RequireCommand(t, mkfs)
	RequireCommand(t, "mount")
	dir := t.TempDir()
	img := filepath.Join(dir, "fs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, append(mkfsArgs, img)...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", mkfs, err, out)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	o := "loop"
	if opts != "" {
		o += "," + opts
	}
	if out, err := exec.Command("mount", "-o", o, img, mnt).CombinedOutput(); err != nil {
		Skip(t, "mount -o "+o+" "+mkfs+" image: "+err.Error()+": "+string(out))
	}
	t.Cleanup(func() {
		// A file just closed by the test can keep the mount busy for a moment.
		for i := 0; i < 20; i++ {
			if exec.Command("umount", mnt).Run() == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		exec.Command("umount", "-l", mnt).Run()
		t.Errorf("could not unmount %s", mnt)
	})
	return mnt
}

// FIEMAP ABI from <linux/fiemap.h> and <linux/fs.h>.
const (
	fsIocFiemap        = 0xC020660B // _IOWR('f', 11, struct fiemap)
	fiemapFlagSync     = 0x1
	fiemapExtentShared = 0x2000
	fiemapHeaderSize   = 32 // struct fiemap without extents
	fiemapExtentSize   = 56 // struct fiemap_extent
)

// SharedExtents returns how many extents the file at p has (up to 256) and how many of
// them carry FIEMAP_EXTENT_SHARED (data shared with another file: a reflink).
func SharedExtents(t testing.TB, p string) (total, shared int) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const n = 256
	buf := make([]byte, fiemapHeaderSize+n*fiemapExtentSize)
	binary.NativeEndian.PutUint64(buf[8:], ^uint64(0)) // fm_length
	binary.NativeEndian.PutUint32(buf[16:], fiemapFlagSync)
	binary.NativeEndian.PutUint32(buf[24:], n) // fm_extent_count
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
		t.Fatalf("FIEMAP %s: %v", p, e)
	}
	for i := 0; i < int(binary.NativeEndian.Uint32(buf[20:])); i++ {
		total++
		if binary.NativeEndian.Uint32(buf[fiemapHeaderSize+i*fiemapExtentSize+40:])&fiemapExtentShared != 0 {
			shared++
		}
	}
	return total, shared
}
