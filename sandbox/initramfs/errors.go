package initramfs

import "errors"

// Sentinel errors of package initramfs; check them with errors.Is.
var (
	// ErrUnknownModule is returned when a requested module is neither in modules.dep
	// nor in modules.builtin of the kernel.
	ErrUnknownModule = errors.New("unknown kernel module")
)
