// Package sparse copies a regular file's data extents and leaves its holes as holes: the
// one extent walk and range copy that the snapshot (W into S) and the flush (S into W)
// share.
//
// Privilege: none; operates on descriptors the caller opened, linked into brood.
package sparse

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrShrank: the source ended before the size the caller gave (it was truncated while
// being copied). The destination then holds what could be read, followed by zeros up to
// size; the caller decides whether that is a failure or left to its digest check.
var ErrShrank = errors.New("source shrank during the copy")

// Extents calls f(off, n) for each data extent in the first size bytes of fd, in offset
// order (offsets and lengths in bytes); the bytes between extents are holes. Extents are
// found with lseek(2) SEEK_DATA/SEEK_HOLE; where the filesystem cannot tell (EINVAL,
// EOPNOTSUPP) the rest of the file is one extent. It returns f's first error, or the wrapped
// lseek error.
func Extents(fd int, size int64, f func(off, n int64) error) error {
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

// Copy copies the data extents of the first size bytes of src into dst at the same
// offsets, then sets dst's size to size (ftruncate), so holes stay holes. dst should be
// empty. Each extent goes through copy_file_range(2), or pread/pwrite through buf (any
// length > 0) where the kernel cannot copy between these files (EXDEV, EINVAL, ENOSYS,
// EOPNOTSUPP). It returns ErrShrank if src ended early, else a wrapped syscall error.
func Copy(src, dst int, size int64, buf []byte) error {
	if err := Extents(src, size, func(off, n int64) error { return copyRange(src, dst, off, n, buf) }); err != nil {
		return err
	}
	// A source cut short after its last data extent reads as a trailing hole: its size tells.
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return fmt.Errorf("fstat source: %w", err)
	}
	if st.Size < size {
		return ErrShrank
	}
	if err := unix.Ftruncate(dst, size); err != nil {
		return fmt.Errorf("ftruncate: %w", err)
	}
	return nil
}

// copyRange copies n bytes at off from src to dst (same offset).
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
			return ErrShrank
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
			return ErrShrank
		}
		if err := PwriteAll(dst, buf[:got], woff); err != nil {
			return err
		}
		roff, woff, n = roff+int64(got), woff+int64(got), n-int64(got)
	}
	return nil
}

// PwriteAll writes all of b to fd at offset off (bytes), retrying short writes and EINTR.
// It returns the wrapped pwrite(2) error.
func PwriteAll(fd int, b []byte, off int64) error {
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
