package helper

import (
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
	return peerCredOf(uc, func(fd int) (Cred, error) {
		u, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			return Cred{}, os.NewSyscallError("getsockopt SO_PEERCRED", err)
		}
		groups, err := peerGroups(fd)
		return Cred{Peer: api.Peer{UID: u.Uid, GID: u.Gid, PID: u.Pid}, Groups: groups}, err
	})
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
