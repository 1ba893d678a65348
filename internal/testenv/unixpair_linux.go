package testenv

import (
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// UnixPair returns the two ends of a connected AF_UNIX socket pair of type sotype
// (unix.SOCK_STREAM, unix.SOCK_SEQPACKET, ...; socketpair(2)), each closed when t ends.
func UnixPair(t testing.TB, sotype int) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, sotype|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(os.NewSyscallError("socketpair", err))
	}
	var conns [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
		t.Cleanup(func() { conns[i].Close() })
	}
	return conns[0], conns[1]
}
