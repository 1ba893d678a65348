package guest

import "errors"

// Sentinel errors of package guest; check them with errors.Is.
var (
	// ErrNotPID1 is returned by Run when brood-guest is not the VM's init process.
	ErrNotPID1 = errors.New("brood-guest must run as PID 1")
	// ErrNoPort is returned when the virtio-serial port for SSH does not show up.
	ErrNoPort = errors.New("virtio-serial port not found")
	// ErrHostGone is returned by writes to the SSH port once the host side closed.
	ErrHostGone = errors.New("virtio-serial port: host disconnected")
	// ErrNoRootfs is returned when the rootfs disk (/dev/vda) does not show up.
	ErrNoRootfs = errors.New("rootfs disk not found")
)
