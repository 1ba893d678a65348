package diff

import (
	"os"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/manifest"
)

// oPath: macOS has no O_PATH; a read-only directory open serves as the *at anchor.
const oPath = unix.O_RDONLY

// openat2Beneath: macOS has no openat2; the caller falls back to one O_NOFOLLOW openat
// per component.
func openat2Beneath(dirfd int, rel string, flags int) (int, error) { return -1, unix.ENOSYS }

// readNames appends the names in the directory fd (without "." and "..") to names. It
// reads a duplicate of fd so the caller keeps its descriptor.
func readNames(fd int, names []string, _ []byte) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return names, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	more, err := f.Readdirnames(-1)
	return append(names, more...), err
}

// foldsCase: APFS and HFS+ volumes are case-insensitive unless formatted otherwise;
// without a cheap portable probe, assume they fold (collisions are then refused).
func foldsCase(fd int) (bool, error) { return true, nil }
