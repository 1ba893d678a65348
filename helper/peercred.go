package helper

import (
	"fmt"
	"net"
)

// peerCredOf runs read on uc's descriptor (the platform's getsockopt calls) and returns
// what it read; any failure, of reaching the descriptor or of read, wraps
// ErrNoCredentials.
func peerCredOf(uc *net.UnixConn, read func(fd int) (Cred, error)) (Cred, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return Cred{}, fmt.Errorf("%w: %w", ErrNoCredentials, err)
	}
	var c Cred
	var opErr error
	err = rc.Control(func(fd uintptr) { c, opErr = read(int(fd)) })
	if err == nil {
		err = opErr
	}
	if err != nil {
		return Cred{}, fmt.Errorf("%w: %w", ErrNoCredentials, err)
	}
	return c, nil
}
