package qemu

import "errors"

// Sentinel errors of package qemu; check them with errors.Is. Errors about the VM's
// life (timeout, failure, bad spec) are the sandbox package's sentinels.
var (
	// ErrNoTSC is returned by TSCkHz when /proc/cpuinfo carries no "cpu MHz" line.
	ErrNoTSC = errors.New("no TSC frequency in cpuinfo")
)
