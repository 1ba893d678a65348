package sshclient

import "errors"

// Sentinel errors of package sshclient, checked with errors.Is.
var (
	// ErrHostKey: the guest presented a host key other than the pinned one.
	ErrHostKey = errors.New("guest host key does not match the pinned key")
	// ErrTrailingKeys: the pinned host key string holds more than one key.
	ErrTrailingKeys = errors.New("more than one key")
	// ErrNoExitStatus: the connection ended before the guest reported an exit status
	// (the VM stopped, timed out or crashed under the command).
	ErrNoExitStatus = errors.New("connection lost before an exit status")
	// ErrHomeFileRefused: the guest answered a home-file request with failure (the reason
	// is in the guest log).
	ErrHomeFileRefused = errors.New("guest refused the home file")
)
