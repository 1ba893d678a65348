package sandbox

import "errors"

// Sentinel errors of package sandbox and its backends; check them with errors.Is.
var (
	// ErrInvalidSpec is returned (wrapped, naming the field) by Spec.Validate and
	// Backend.Start when a VM spec is incomplete or out of range.
	ErrInvalidSpec = errors.New("invalid VM spec")
	// ErrTimeout is returned by VM.Wait when the VM ran longer than Spec.Timeout
	// (or the context passed to Wait ended) and the VMM was killed.
	ErrTimeout = errors.New("VM timed out")
	// ErrVMFailed is returned by VM.Wait when the VMM exited abnormally (non-zero
	// status or killed by a signal other than Stop).
	ErrVMFailed = errors.New("VM failed")
	// ErrUnavailable is returned by Backend.Probe when the backend cannot run at
	// all on this host (for example qemu-system-x86_64 is not installed).
	ErrUnavailable = errors.New("VM backend unavailable")
)
