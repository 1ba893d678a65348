package nftrules

import "errors"

// Errors returned by this package, checked with errors.Is.
var (
	// ErrBadIfName: an interface name is not 1–15 bytes without '/', ':', whitespace or NUL
	// (the kernel's dev_valid_name, IFNAMSIZ 16 including the terminating NUL).
	ErrBadIfName = errors.New("invalid interface name")
	// ErrBadSession: a session id is not 1–12 lower-case letters and digits, or a session
	// has no proxy address.
	ErrBadSession = errors.New("invalid session")
	// ErrBadElement: a set element is not exactly one address, or is in a refused range.
	ErrBadElement = errors.New("invalid set element")
)
