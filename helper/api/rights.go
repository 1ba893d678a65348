package api

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ParseRights is brood's one SCM_RIGHTS parser (unix(7)), used on every socket that carries
// descriptors: the client and helper frames (Conn), the runner's control channel and the
// runner spawner. It returns the descriptors of every SCM_RIGHTS message in oob, a control
// message buffer filled by recvmsg(2), as files named name; other control messages
// (SCM_CREDENTIALS: identity is read with SO_PEERCRED instead) are skipped. A malformed
// buffer is an error and yields no files. The caller owns the files; receive with
// MSG_CMSG_CLOEXEC (Go's ReadMsgUnix does) so that none leaks into a child.
func ParseRights(oob []byte, name string) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var files []*os.File
	for i := range msgs {
		fds, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			continue // not SCM_RIGHTS
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), name))
		}
	}
	return files, nil
}
