package snapshot

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/testenv"
)

// FIEMAP ABI from <linux/fiemap.h> and <linux/fs.h>.
const (
	fsIocFiemap        = 0xC020660B // _IOWR('f', 11, struct fiemap)
	fiemapFlagSync     = 0x1
	fiemapExtentLast   = 0x1
	fiemapExtentShared = 0x2000
	fiemapHeaderSize   = 32 // struct fiemap without extents
	fiemapExtentSize   = 56 // struct fiemap_extent
)

// sharedExtents returns how many of the file's extents there are and how many carry
// FIEMAP_EXTENT_SHARED (data shared with another file: a reflink).
func sharedExtents(t *testing.T, p string) (total, shared int) {
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
	mapped := int(binary.NativeEndian.Uint32(buf[20:]))
	for i := 0; i < mapped; i++ {
		flags := binary.NativeEndian.Uint32(buf[fiemapHeaderSize+i*fiemapExtentSize+40:])
		total++
		if flags&fiemapExtentShared != 0 {
			shared++
		}
	}
	return total, shared
}

func usedBytes(t *testing.T, p string) int64 {
	t.Helper()
	unix.Sync()
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// mountLoop makes a filesystem image of size bytes with mkfs in a temp dir, mounts it
// with -o loop and returns the mount point; the mount is undone when the test ends.
func mountLoop(t *testing.T, mkfs string, size int64, args ...string) string {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, mkfs)
	testenv.RequireCommand(t, "mount")
	dir := t.TempDir()
	img := filepath.Join(dir, "fs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, append(args, img)...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", mkfs, err, out)
	}
	mnt := filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		testenv.Skip(t, "mount -o loop "+mkfs+" image: "+err.Error()+": "+string(out))
	}
	t.Cleanup(func() {
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

// TestReflinkOnLoopFilesystems snapshots on real btrfs and xfs (loop images) and proves
// FICLONE was used: the report counts reflinks, S's and the base's extents are shared
// with W's (FIEMAP_EXTENT_SHARED), and free space did not shrink by the data size.
func TestReflinkOnLoopFilesystems(t *testing.T) {
	for _, fs := range []struct {
		mkfs string
		size int64
		args []string
	}{
		{"mkfs.btrfs", 256 << 20, []string{"-q"}},
		{"mkfs.xfs", 512 << 20, []string{"-q", "-m", "reflink=1"}},
	} {
		t.Run(fs.mkfs, func(t *testing.T) {
			mnt := mountLoop(t, fs.mkfs, fs.size, fs.args...)
			w := filepath.Join(mnt, "w")
			const big = 64 << 20
			data := make([]byte, big)
			rand.Read(data)
			write(t, filepath.Join(w, "big.bin"), string(data), 0o644)
			write(t, filepath.Join(w, "src/a.go"), "package a\n", 0o644)
			write(t, filepath.Join(w, ".env"), canary, 0o600)
			unix.Sync()
			before := usedBytes(t, mnt)
			sess := filepath.Join(mnt, "sess")
			os.Mkdir(sess, 0o700)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			m, rep, err := Take(ctx, w, filepath.Join(sess, "snapshot"), Options{KeepBase: true, BaseDir: filepath.Join(sess, "base")})
			if err != nil {
				t.Fatal(err)
			}
			grew := usedBytes(t, mnt) - before
			if rep.Reflinked != 2 || rep.Copied != 0 || rep.BaseFiles != 2 {
				t.Errorf("report: reflinked %d copied %d base %d, want 2/0/2", rep.Reflinked, rep.Copied, rep.BaseFiles)
			}
			for _, p := range []string{filepath.Join(sess, "snapshot/big.bin"), filepath.Join(sess, "base/big.bin")} {
				total, shared := sharedExtents(t, p)
				if total == 0 || shared != total {
					t.Errorf("%s: %d of %d extents shared, want all", p, shared, total)
				}
				if b, _ := os.ReadFile(p); !bytes.Equal(b, data) {
					t.Errorf("%s: content differs", p)
				}
			}
			if grew > big/4 {
				t.Errorf("used space grew by %d bytes for two clones of %d bytes", grew, big)
			}
			if _, err := os.Lstat(filepath.Join(sess, "base/.env")); err == nil {
				t.Errorf("secret in base")
			}
			checkManifestMatches(t, w, filepath.Join(sess, "snapshot"), m)
			grepTree(t, sess, canary)
		})
	}
}
