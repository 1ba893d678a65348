package snapshot

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/testenv"
)

// sharedExtents: see testenv.SharedExtents.
func sharedExtents(t *testing.T, p string) (total, shared int) { return testenv.SharedExtents(t, p) }

func usedBytes(t *testing.T, p string) int64 {
	t.Helper()
	unix.Sync()
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// mountLoop mounts a fresh loop filesystem of size bytes made by mkfs with args
// (testenv.MountLoop).
func mountLoop(t *testing.T, mkfs string, size int64, args ...string) string {
	return testenv.MountLoop(t, mkfs, size, "", args...)
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
