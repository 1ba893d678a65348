package diff

import (
	"golang.org/x/sys/unix"
)

// oPath opens a directory only as an anchor for *at calls (O_PATH, Linux ≥ 2.6.39).
const oPath = unix.O_PATH

// openat2Beneath opens rel below dirfd with openat2(2) (Linux ≥ 5.6), refusing any
// symlink on the way (RESOLVE_NO_SYMLINKS, RESOLVE_NO_MAGICLINKS) and any escape from
// dirfd (RESOLVE_BENEATH). It returns ENOSYS on older kernels.
func openat2Beneath(dirfd int, rel string, flags int) (int, error) {
	return unix.Openat2(dirfd, rel, &unix.OpenHow{
		Flags:   uint64(flags),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// readNames appends the names in the directory fd (without "." and "..") to names,
// reading getdents64 records into buf.
func readNames(fd int, names []string, buf []byte) ([]string, error) {
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return names, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}
