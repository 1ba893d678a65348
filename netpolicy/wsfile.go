package netpolicy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrWorkspaceSymlink: a file brood reads from a workspace, or a directory on the way to
// it inside the workspace, is a symbolic link (a repository could point it at any file
// of the developer's, e.g. ~/.ssh/id_ed25519).
var ErrWorkspaceSymlink = errors.New("is a symlink")

// ErrWorkspaceNotRegular: a file brood reads from a workspace is not a regular file (a
// FIFO would block, a device would read host state).
var ErrWorkspaceNotRegular = errors.New("is not a regular file")

// MaxWorkspaceFileBytes caps a configuration file read from a workspace (1 MiB).
const MaxWorkspaceFileBytes = 1 << 20

// ReadWorkspaceFile reads the regular file rel (a relative slash path, no "..") inside
// directory ws, following no symbolic link at or below ws: each directory is opened with
// openat(2) O_NOFOLLOW|O_DIRECTORY from the one before, the file with O_NOFOLLOW|O_NONBLOCK.
// ws itself may be a link (the user named it). At most limit bytes are accepted.
// Errors name the path: a missing file wraps fs.ErrNotExist, a link ErrWorkspaceSymlink, a
// FIFO, device or directory ErrWorkspaceNotRegular, a longer file ErrBadPolicy.
func ReadWorkspaceFile(ws, rel string, limit int64) ([]byte, error) {
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return nil, fmt.Errorf("read workspace file %q: not a plain relative path", rel)
		}
	}
	dfd, err := unix.Open(ws, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: ws, Err: err}
	}
	for i, p := range parts {
		path := filepath.Join(ws, filepath.FromSlash(strings.Join(parts[:i+1], "/")))
		flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_DIRECTORY
		if i == len(parts)-1 {
			flags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK
		}
		fd, err := unix.Openat(dfd, p, flags, 0)
		if err != nil {
			var st unix.Stat_t
			if unix.Fstatat(dfd, p, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = ErrWorkspaceSymlink
			}
			unix.Close(dfd)
			return nil, fmt.Errorf("read workspace file %s: %w", path, err)
		}
		unix.Close(dfd)
		dfd = fd
	}
	path := filepath.Join(ws, filepath.FromSlash(rel))
	f := os.NewFile(uintptr(dfd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read workspace file %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read workspace file %s: %w (mode %s)", path, ErrWorkspaceNotRegular, fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read workspace file %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("read workspace file %s: longer than %d bytes: %w", path, limit, ErrBadPolicy)
	}
	return data, nil
}
