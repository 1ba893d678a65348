package diff

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/digest"
	"brood.dev/brood/frontend/manifest"
)

// binarySniffLen is how many leading bytes IsBinary looks at: 8000, git's FIRST_FEW_BYTES
// (xdiff-interface.c, buffer_is_binary).
const binarySniffLen = 8000

// Digest is what one pass over a file's bytes learns: its content digest (package
// digest: 64 KiB blocks, zero blocks as one byte, never the plain SHA-256 of the bytes),
// its size and whether any byte is NUL (a hole counts: it reads as NULs).
type Digest = digest.Result

// HashReader reads r to EOF and returns the content digest of the raw bytes (no newline
// normalisation: CRLF and LF differ), the byte count and whether any byte is NUL. Memory
// use is one 64 KiB buffer, independent of the size.
func HashReader(r io.Reader) (Digest, error) {
	return digest.Reader(r)
}

// HashFile returns the content digest (digest.Size bytes) of the regular file at path,
// reading only its data (holes are skipped, package digest). The last component is
// opened with O_NOFOLLOW (a symlink is an error, never followed) and O_NONBLOCK (a FIFO
// cannot block it); anything but a regular file is ErrNotRegular.
func HashFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if manifest.TypeFromMode(uint32(st.Mode)) != manifest.TypeRegular {
		return nil, fmt.Errorf("hash %q: %w", path, ErrNotRegular)
	}
	d, err := digest.File(f)
	if err != nil {
		return nil, fmt.Errorf("hash %q: %w", path, err)
	}
	return d.Sum, nil
}

// IsBinary reports whether content looks binary the way git decides it: a NUL byte in
// the first 8000 bytes. Callers that have the whole file (Change.Binary) look at every
// byte instead.
func IsBinary(content []byte) bool {
	if len(content) > binarySniffLen {
		content = content[:binarySniffLen]
	}
	return bytes.IndexByte(content, 0) >= 0
}

// ReadFile returns the content of the regular file rel (relative, '/'-separated) below
// the directory root, opened without following a symlink in any component and without
// leaving root. It reads at most max bytes (ErrTooLarge beyond) and, when want is not nil,
// requires the content's digest (package digest) to equal want (ErrChanged otherwise), so what a caller
// shows is exactly what was reviewed.
func ReadFile(root, rel string, want []byte, max int64) ([]byte, error) {
	if err := CheckPath(rel); err != nil && !errors.Is(err, ErrControlByte) {
		return nil, err
	}
	r, err := openRoot("root", root)
	if err != nil {
		return nil, err
	}
	defer r.close()
	fd, err := r.openBeneath(rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), filepath.Join(root, Escape(rel)))
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	if manifest.TypeFromMode(uint32(st.Mode)) != manifest.TypeRegular {
		return nil, fmt.Errorf("read %s: %w", f.Name(), ErrNotRegular)
	}
	if st.Size > max {
		return nil, fmt.Errorf("read %s (%d bytes, limit %d): %w", f.Name(), st.Size, max, ErrTooLarge)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("read %s (limit %d bytes): %w", f.Name(), max, ErrTooLarge)
	}
	if want != nil {
		if !bytes.Equal(digest.Bytes(b), want) {
			return nil, fmt.Errorf("read %s: %w", f.Name(), ErrChanged)
		}
	}
	return b, nil
}
