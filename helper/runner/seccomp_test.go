package runner

import (
	"encoding/binary"
	"runtime"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompData encodes a struct seccomp_data for golang.org/x/net/bpf's VM, which loads
// words big-endian: each 32-bit field is written big-endian where the kernel would find it
// in native order, so the filter sees the values the kernel would show it.
func seccompData(arch, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[seccompNR:], nr)
	binary.BigEndian.PutUint32(b[seccompArch:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[seccompArgs+8*i:], uint32(a))       // lower half first
		binary.BigEndian.PutUint32(b[seccompArgs+8*i+4:], uint32(a>>32)) // then the upper
	}
	return b
}

// TestPolicies runs both filters on calls, in the BPF VM: what each returns.
func TestPolicies(t *testing.T) {
	if auditArch() == 0 {
		t.Skipf("no seccomp filter for %s", runtime.GOARCH)
	}
	arch := auditArch()
	allow := uint32(unix.SECCOMP_RET_ALLOW)
	eafno, eperm, enosys := errnoRet(unix.EAFNOSUPPORT), errnoRet(unix.EPERM), errnoRet(unix.ENOSYS)
	for _, tc := range []struct {
		name   string
		policy Policy
		data   []byte
		want   uint32
	}{
		{"unix stream socket", RunnerPolicy(), seccompData(arch, unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC), allow},
		{"unix seqpacket socketpair", RunnerPolicy(), seccompData(arch, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_SEQPACKET), allow},
		{"inet socket", RunnerPolicy(), seccompData(arch, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM), eafno},
		{"inet6 socket", RunnerPolicy(), seccompData(arch, unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM), eafno},
		{"netlink socket", RunnerPolicy(), seccompData(arch, unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW), eafno},
		{"AF_UNIX with upper bits", RunnerPolicy(), seccompData(arch, unix.SYS_SOCKET, 1<<32|unix.AF_UNIX, unix.SOCK_STREAM), eafno},
		{"unix dgram socket", RunnerPolicy(), seccompData(arch, unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK), eafno},
		{"unix raw socket", RunnerPolicy(), seccompData(arch, unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_RAW), eafno},
		{"unix dgram socketpair", RunnerPolicy(), seccompData(arch, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_DGRAM), eafno},
		{"io_uring_setup", RunnerPolicy(), seccompData(arch, unix.SYS_IO_URING_SETUP, 8, 0), enosys},
		{"io_uring_enter", RunnerPolicy(), seccompData(arch, unix.SYS_IO_URING_ENTER), enosys},
		{"unshare", RunnerPolicy(), seccompData(arch, unix.SYS_UNSHARE, unix.CLONE_NEWUSER), eperm},
		{"setns", RunnerPolicy(), seccompData(arch, unix.SYS_SETNS, 3, 0), eperm},
		{"connect (runner)", RunnerPolicy(), seccompData(arch, unix.SYS_CONNECT, 3), allow},
		{"read", RunnerPolicy(), seccompData(arch, unix.SYS_READ, 0), allow},
		// A call whose argument equals another rule's call number still gets its own answer
		// (each rule loads the call number again).
		{"socket with a type equal to unshare's number", RunnerPolicy(), seccompData(arch, unix.SYS_SOCKET, unix.AF_UNIX, unix.SYS_UNSHARE&^unix.SOCK_DGRAM), allow},
		{"foreign architecture", RunnerPolicy(), seccompData(0x40000003, 359, unix.AF_INET), unix.SECCOMP_RET_KILL_PROCESS}, // AUDIT_ARCH_I386, socket
		{"connect (VMM)", VMMPolicy(), seccompData(arch, unix.SYS_CONNECT, 3), eperm},
		{"accept (VMM)", VMMPolicy(), seccompData(arch, unix.SYS_ACCEPT4, 3), allow},
		{"foreign architecture (VMM)", VMMPolicy(), seccompData(0x40000003, 362), unix.SECCOMP_RET_KILL_PROCESS},
	} {
		vm, err := bpf.NewVM(tc.policy)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, err := vm.Run(tc.data)
		if err != nil || uint32(got) != tc.want {
			t.Errorf("%s: filter returns %#x (%v), want %#x", tc.name, uint32(got), err, tc.want)
		}
	}
	if runtime.GOARCH == "amd64" {
		vm, _ := bpf.NewVM(RunnerPolicy())
		if got, _ := vm.Run(seccompData(arch, x32SyscallBit|41, unix.AF_INET)); uint32(got) != enosys {
			t.Errorf("x32 socket: %#x, want ENOSYS", uint32(got))
		}
	}
}
