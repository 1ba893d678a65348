package kernel

import "errors"

// Sentinel errors of package kernel; check them with errors.Is.
var (
	// ErrNotBzImage is returned by Vmlinux when the input lacks the x86 boot
	// protocol's "HdrS" setup header (Documentation/arch/x86/boot.rst).
	ErrNotBzImage = errors.New("not an x86 bzImage")
	// ErrCompression is returned by Vmlinux when the payload's compression is not
	// one brood can undo (xz and gzip are; the Debian amd64 kernels use xz).
	ErrCompression = errors.New("unsupported kernel payload compression")
	// ErrNoPackage is returned by ResolvePackage when apt names no kernel ABI package.
	ErrNoPackage = errors.New("no kernel package found")
)
