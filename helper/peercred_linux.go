package helper

import (
	"fmt"
	"net"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
)

// PeerCred reads the peer's credentials from a connected Unix socket: SO_PEERCRED (uid,
// gid, pid at connect time) and SO_PEERGROUPS (supplementary groups, Linux >= 4.13).
// Any failure wraps ErrNoCredentials; the caller then closes the connection.
func PeerCred(uc *net.UnixConn) (Cred, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return Cred{}, fmt.Errorf("%w: %w", ErrNoCredentials, err)
	}
	var c Cred
	var opErr error
	err = rc.Control(func(fd uintptr) {
		u, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			opErr = os.NewSyscallError("getsockopt SO_PEERCRED", err)
			return
		}
		c.Peer = api.Peer{UID: u.Uid, GID: u.Gid, PID: u.Pid}
		c.Groups, opErr = peerGroups(int(fd))
	})
	if err == nil {
		err = opErr
	}
	if err != nil {
		return Cred{}, fmt.Errorf("%w: %w", ErrNoCredentials, err)
	}
	return c, nil
}

// peerGroups reads SO_PEERGROUPS, growing the buffer when the kernel answers ERANGE
// (the kernel then reports the needed length). x/sys/unix has no typed wrapper.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 32)
	for range 3 {
		l := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)), 0)
		switch e {
		case 0:
			return buf[:l/4], nil
		case unix.ERANGE:
			buf = make([]uint32, l/4+1)
		default:
			return nil, os.NewSyscallError("getsockopt SO_PEERGROUPS", e)
		}
	}
	return nil, os.NewSyscallError("getsockopt SO_PEERGROUPS", unix.ERANGE)
}
