package flush

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/digest"
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
	if err := copyExtents(src, dst, size, buf); err != nil {
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
		if err := pwriteAll(dst, buf[:n], off); err != nil {
			return nil, err
		}
		h.Write(buf[:n])
		off += int64(n)
	}
	return h.Result().Sum, nil
}

// extents calls f(off, n) for each data extent of the first size bytes of fd, in order
// (lseek(2) SEEK_DATA/SEEK_HOLE; one extent of everything where the filesystem cannot
// tell). Bytes between extents are holes.
func extents(fd int, size int64, f func(off, n int64) error) error {
	var off int64
	for off < size {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			return nil // only a hole remains
		}
		hole := size
		switch {
		case err == unix.EINVAL || err == unix.EOPNOTSUPP:
			data = off
		case err != nil:
			return fmt.Errorf("lseek SEEK_DATA: %w", err)
		default:
			if hole, err = unix.Seek(fd, data, unix.SEEK_HOLE); err != nil {
				return fmt.Errorf("lseek SEEK_HOLE: %w", err)
			}
		}
		if data >= size {
			return nil
		}
		hole = min(hole, size)
		if err := f(data, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// copyExtents copies the data extents of src into dst at the same offsets and sets dst's
// size, so holes stay holes.
func copyExtents(src, dst int, size int64, buf []byte) error {
	err := extents(src, size, func(off, n int64) error { return copyRange(src, dst, off, n, buf) })
	if err != nil {
		return err
	}
	if err := unix.Ftruncate(dst, size); err != nil {
		return fmt.Errorf("ftruncate: %w", err)
	}
	return nil
}

// copyRange copies n bytes at off from src to dst (same offset) with copy_file_range(2),
// or pread/pwrite through buf where the kernel cannot between these files.
func copyRange(src, dst int, off, n int64, buf []byte) error {
	roff, woff := off, off
	for n > 0 {
		got, err := unix.CopyFileRange(src, &roff, dst, &woff, int(min(n, 1<<30)), 0)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EXDEV || err == unix.EINVAL || err == unix.ENOSYS || err == unix.EOPNOTSUPP {
			break
		}
		if err != nil {
			return fmt.Errorf("copy_file_range: %w", err)
		}
		if got == 0 {
			return nil // shrank: the hash tells
		}
		n -= int64(got)
	}
	for n > 0 {
		got, err := unix.Pread(src, buf[:min(int64(len(buf)), n)], roff)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("read source: %w", err)
		}
		if got == 0 {
			return nil
		}
		if err := pwriteAll(dst, buf[:got], woff); err != nil {
			return err
		}
		roff, woff, n = roff+int64(got), woff+int64(got), n-int64(got)
	}
	return nil
}

func pwriteAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
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
