package guestcfg

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// HomeFileRequest is the SSH channel request (RFC 4254 section 6.5, a name of the
// "name@domain" form section 4.2 of RFC 4250 reserves for extensions) with which the
// host writes one file into the agent's home, on a session channel before any exec or
// shell request. Its payload is a HomeFile in SSH wire encoding (ssh.Marshal); the guest
// replies true once the file is in place, false otherwise (the reason is in the guest
// log). Files travel this way, not in the initramfs, so that what they hold (an API key,
// or its placeholder) is never written to a host artifact.
const HomeFileRequest = "home-file@brood.dev"

// MaxHomeFile is the largest HomeFile.Data, in bytes: the request must fit in one SSH
// packet (golang.org/x/crypto/ssh reads packets of up to 256 KiB).
const MaxHomeFile = 128 << 10

// HomeFile is one file of the agent's home. Path is relative to the home, slash-separated,
// clean, without ".." (ValidHomePath); Mode holds permission bits only (0o777); missing
// parent directories are made with mode 0700. An existing file at Path is replaced, never
// written through (a symlink there is replaced, not followed).
type HomeFile struct {
	Path string
	Mode uint32
	Data []byte
}

// ErrHomeFile is the error of a HomeFile the guest would refuse.
var ErrHomeFile = errors.New("invalid home file")

// Check returns an error wrapping ErrHomeFile unless f's path is valid, its mode holds
// only permission bits and its data is at most MaxHomeFile bytes.
func (f HomeFile) Check() error {
	switch {
	case !ValidHomePath(f.Path):
		return fmt.Errorf("home file %q: %w: not a clean relative path", f.Path, ErrHomeFile)
	case f.Mode&^0o777 != 0:
		return fmt.Errorf("home file %q: %w: mode %#o has more than permission bits", f.Path, ErrHomeFile, f.Mode)
	case len(f.Data) > MaxHomeFile:
		return fmt.Errorf("home file %q: %w: %d bytes, more than %d", f.Path, ErrHomeFile, len(f.Data), MaxHomeFile)
	}
	return nil
}

// ValidHomePath reports whether p is a clean, relative, slash-separated path of at most
// 512 bytes without "." or ".." components or NUL bytes.
func ValidHomePath(p string) bool {
	if p == "" || len(p) > 512 || strings.ContainsRune(p, 0) || path.IsAbs(p) || path.Clean(p) != p {
		return false
	}
	for _, c := range strings.Split(p, "/") {
		if c == "." || c == ".." {
			return false
		}
	}
	return true
}
