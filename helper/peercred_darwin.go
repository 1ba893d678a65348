package helper

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
)

// PeerCred reads the peer's credentials with LOCAL_PEERCRED (uid and groups; the first
// group is the effective gid) and LOCAL_PEERPID. Any failure wraps ErrNoCredentials.
func PeerCred(uc *net.UnixConn) (Cred, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return Cred{}, fmt.Errorf("%w: %w", ErrNoCredentials, err)
	}
	var c Cred
	var opErr error
	err = rc.Control(func(fd uintptr) {
		x, err := unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
		if err != nil {
			opErr = os.NewSyscallError("getsockopt LOCAL_PEERCRED", err)
			return
		}
		if x.Ngroups < 1 {
			opErr = fmt.Errorf("LOCAL_PEERCRED returned no groups")
			return
		}
		c.Peer = api.Peer{UID: x.Uid, GID: x.Groups[0]}
		c.Groups = append([]uint32(nil), x.Groups[1:x.Ngroups]...)
		if pid, err := unix.GetsockoptInt(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERPID); err == nil {
			c.PID = int32(pid)
		}
	})
	if err == nil {
		err = opErr
	}
	if err != nil {
		return Cred{}, fmt.Errorf("%w: %w", ErrNoCredentials, err)
	}
	return c, nil
}
