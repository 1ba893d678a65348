package helper

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"

	"github.com/coreos/go-systemd/v22/activation"
)

// SocketFDName is the name of the activated socket (FileDescriptorName= in
// systemd/broodd-helper.socket, the Sockets key in the launchd plist).
const SocketFDName = "helper"

// SocketMode is the mode of the helper socket: root and group brood may connect
// (connecting needs write permission on the socket inode, connect(2)).
const SocketMode = 0o660

// ActivatedListener takes the socket passed by the service manager, strictly: LISTEN_FDS
// and LISTEN_PID must be set, LISTEN_PID must be this process, and exactly one descriptor
// must be named SocketFDName and be a Unix stream listener. Other passed descriptors are
// closed. Failures wrap ErrNoActivation with a message that says what was missing.
// The LISTEN_* variables are unset afterwards.
func ActivatedListener() (*net.UnixListener, error) {
	fds, pid := os.Getenv("LISTEN_FDS"), os.Getenv("LISTEN_PID")
	if fds == "" || pid == "" {
		return nil, fmt.Errorf("%w: LISTEN_FDS/LISTEN_PID not set (start broodd-helper through broodd-helper.socket, or pass --listen PATH for development)", ErrNoActivation)
	}
	if pid != strconv.Itoa(os.Getpid()) {
		return nil, fmt.Errorf("%w: LISTEN_PID=%s is not this process (%d)", ErrNoActivation, pid, os.Getpid())
	}
	named, err := activation.ListenersWithNames()
	if err != nil {
		return nil, fmt.Errorf("%w: take activated sockets: %w", ErrNoActivation, err)
	}
	var got []string
	var ln *net.UnixListener
	for name, ls := range named {
		for _, l := range ls {
			got = append(got, name)
			if ul, ok := l.(*net.UnixListener); ok && name == SocketFDName && ln == nil {
				ln = ul
				continue
			}
			if l != nil {
				l.Close()
			}
		}
	}
	if ln == nil {
		return nil, fmt.Errorf("%w: no Unix stream socket named %q among LISTEN_FDNAMES %v", ErrNoActivation, SocketFDName, got)
	}
	return ln, nil
}

// ListenPath creates the helper socket at path (development and tests: --listen). A
// stale socket at path is replaced; any other file there is an error. The socket gets
// SocketMode and, when gid >= 0, that group.
func ListenPath(path string, gid int) (*net.UnixListener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("listen %q: exists and is not a socket (%v)", path, fi.Mode().Type())
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %q: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("lstat %q: %w", path, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen %q: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("chown socket %q: %w", path, err)
		}
	}
	if err := os.Chmod(path, SocketMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod socket %q: %w", path, err)
	}
	return ln, nil
}
