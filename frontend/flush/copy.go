package flush

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/digest"
	"brood.dev/brood/internal/sparse"
)

// reflinkMin is the smallest file (bytes) the flush tries to reflink (FICLONE) rather
// than copy: below it a copy through the worker's buffer costs less than reading the
// clone back to verify it.
const reflinkMin = 64 << 10

// cloner remembers, per (source, destination) device pair, that FICLONE was refused
// there (EOPNOTSUPP, EXDEV, ENOTTY, ENOSYS), so each apply tries it once per pair.
type cloner struct{ no sync.Map }

type devPair struct{ src, dst uint64 }

// copyFile writes the size bytes of the regular file src into the new, empty file dst
// (both at offset 0) and returns the content digest (package digest) of what dst then
// holds. It reflinks (FICLONE, ioctl_ficlone(2))
// where both are on one filesystem that can; else a file with holes (fewer blocks than
// its size) or larger than copyBufSize is copied extent by extent (lseek(2)
// SEEK_DATA/SEEK_HOLE, then copy_file_range(2), or pread/pwrite where the kernel cannot),
// leaving holes as holes; else it goes through buf. After a reflink or an extent copy
// the digest is taken by reading dst back (digest.File: its data read, blocks inside its
// holes skipped), so it is always the digest of what was written, whatever src did
// meanwhile, at a cost proportional to the data, not the size.
func (c *cloner) copyFile(src, dst int, size int64, buf []byte) ([]byte, error) {
	var sst, dst2 unix.Stat_t
	if err := unix.Fstat(src, &sst); err != nil {
		return nil, fmt.Errorf("fstat source: %w", err)
	}
	if err := unix.Fstat(dst, &dst2); err != nil {
		return nil, fmt.Errorf("fstat destination: %w", err)
	}
	pair := devPair{sst.Dev, dst2.Dev}
	if _, no := c.no.Load(pair); !no && size >= reflinkMin && sst.Size == size {
		err := unix.IoctlFileClone(dst, src)
		switch {
		case err == nil:
			return hashExtents(dst, size)
		case err == unix.EOPNOTSUPP || err == unix.EXDEV || err == unix.ENOTTY || err == unix.ENOSYS:
			c.no.Store(pair, true)
		}
		// Any other error (EINVAL for a btrfs nodatacow file, ...) concerns this file: copy.
	}
	if sst.Blocks*512 >= size && size <= int64(len(buf)) {
		return copyDense(src, dst, size, buf)
	}
	// A source that shrank is left to the digest check below (ErrHashMismatch).
	if err := sparse.Copy(src, dst, size, buf); err != nil && !errors.Is(err, sparse.ErrShrank) {
		return nil, err
	}
	// Start writing the copied data back now (sync_file_range(2) SYNC_FILE_RANGE_WRITE does
	// not wait), so the disk works while the digest is taken and the caller's fsync has
	// less left to wait for. Best effort: durability still comes from that fsync.
	unix.SyncFileRange(dst, 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	return hashExtents(dst, size)
}

// copyDense copies size bytes from src to dst through buf, digesting them.
func copyDense(src, dst int, size int64, buf []byte) ([]byte, error) {
	h := digest.New()
	var off int64
	for off < size {
		n, err := unix.Pread(src, buf[:min(int64(len(buf)), size-off)], off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read source: %w", err)
		}
		if n == 0 {
			break // shrank: the hash tells
		}
		if err := sparse.PwriteAll(dst, buf[:n], off); err != nil {
			return nil, err
		}
		h.Write(buf[:n])
		off += int64(n)
	}
	return h.Result().Sum, nil
}

// hashExtents returns the content digest (package digest) of the whole content of fd
// as it reads now: its data read, blocks inside its holes skipped (digest.File), and
// anything past size (the file grew) or short of it (it shrank) an ErrHashMismatch. fd
// must be readable or, for a write-only fd, reopenable through /proc/self/fd.
func hashExtents(fd int, size int64) ([]byte, error) {
	rfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("reopen to verify: %w", err)
	}
	f := os.NewFile(uintptr(rfd), "verify")
	defer f.Close()
	d, err := digest.File(f)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	if d.Size != size {
		return nil, fmt.Errorf("verify: size %d, want %d: %w", d.Size, size, ErrHashMismatch)
	}
	return d.Sum, nil
}
