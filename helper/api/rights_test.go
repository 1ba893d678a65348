//go:build linux

package api

import (
	"io"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestParseRights sends two pipe ends by SCM_RIGHTS together with an SCM_CREDENTIALS
// message over a real socketpair: ParseRights returns exactly the two descriptors, in
// order, and they are the pipe (data written to one end is read from the other). A
// malformed buffer is an error with no files.
func TestParseRights(t *testing.T) {
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sp[0])
	defer unix.Close(sp[1])
	if err := unix.SetsockoptInt(sp[1], unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	cred := unix.UnixCredentials(&unix.Ucred{Pid: int32(os.Getpid()), Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())})
	oob := append(cred, unix.UnixRights(int(r.Fd()), int(w.Fd()))...)
	if err := unix.Sendmsg(sp[0], []byte("x"), oob, nil, 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	roob := make([]byte, unix.CmsgSpace(unix.SizeofUcred)+unix.CmsgSpace(2*4))
	_, oobn, flags, _, err := unix.Recvmsg(sp[1], buf, roob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || flags&unix.MSG_CTRUNC != 0 {
		t.Fatalf("recvmsg: %v (flags %#x)", err, flags)
	}
	files, err := ParseRights(roob[:oobn], "test")
	if err != nil || len(files) != 2 {
		t.Fatalf("ParseRights = %v, %v; want 2 files", files, err)
	}
	defer files[0].Close()
	defer files[1].Close()
	if _, err := files[1].Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 2)
	if _, err := io.ReadFull(r, got); err != nil || string(got) != "ok" {
		t.Errorf("through the received write end: %q, %v", got, err)
	}
	if files[0].Name() != "test" {
		t.Errorf("name %q", files[0].Name())
	}
	// A header whose length runs past the buffer (a rights message cut short).
	if fs, err := ParseRights(unix.UnixRights(int(r.Fd()))[:unix.CmsgLen(0)+1], "test"); err == nil || len(fs) != 0 {
		t.Errorf("malformed buffer: %v, %v", fs, err)
	}
}
