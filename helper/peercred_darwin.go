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
	return peerCredOf(uc, func(fd int) (Cred, error) {
		x, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
		if err != nil {
			return Cred{}, os.NewSyscallError("getsockopt LOCAL_PEERCRED", err)
		}
		if x.Ngroups < 1 {
			return Cred{}, fmt.Errorf("LOCAL_PEERCRED returned no groups")
		}
		c := Cred{Peer: api.Peer{UID: x.Uid, GID: x.Groups[0]}, Groups: append([]uint32(nil), x.Groups[1:x.Ngroups]...)}
		if pid, err := unix.GetsockoptInt(fd, unix.SOL_LOCAL, unix.LOCAL_PEERPID); err == nil {
			c.PID = int32(pid)
		}
		return c, nil
	})
}
