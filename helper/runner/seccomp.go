package runner

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The runner's seccomp filters. Both allow every system call they do not name (QEMU's own
// -sandbox filter, which QEMU installs on top, refuses the obsolete, privilege, spawn and
// resource-control calls); they exist to take away what a QEMU escape would use to get
// past egress and reach the developer:
//
//   - RunnerPolicy, on every thread of the runner (and so inherited by QEMU): socket(2)
//     and socketpair(2) only for AF_UNIX (anything else fails with EAFNOSUPPORT: no
//     AF_INET/AF_INET6 UDP or TCP, no AF_PACKET, AF_NETLINK or AF_VSOCK), and AF_UNIX only
//     as SOCK_STREAM or SOCK_SEQPACKET (a datagram socket, even one of a socketpair, can
//     sendto(2) any pathname datagram socket its uid may write: EAFNOSUPPORT too); no
//     io_uring (ENOSYS: its socket and connect operations are not system calls a filter
//     sees; QEMU falls back to ppoll); no unshare(2) or setns(2) (EPERM: the runner runs
//     in a user namespace of its own, package spawner, and must not make more namespaces,
//     each a new set of capabilities over new kernel objects).
//   - VMMPolicy, on the one thread that forks QEMU only: no connect(2) at all (EPERM).
//     QEMU only listens (its SSH chardev is a server socket); a connect could reach the
//     developer's ssh-agent or session bus, which Landlock (ABI 7) cannot refuse: pathname
//     unix sockets are outside its filesystem rights.
//
// Both start alike: a call made for another architecture (the i386 ABI through int 0x80
// on x86-64, which has other call numbers) kills the process, and on x86-64 an x32 call
// fails with ENOSYS; otherwise those calls would pass unfiltered.
//
// Numbers: AF_UNIX = 1, SOCK_DGRAM = 2 (include/linux/socket.h, include/linux/net.h);
// AF_UNIX turns SOCK_RAW (3) into SOCK_DGRAM (net/unix/af_unix.c), and every type with bit
// 2 set (DGRAM 2, RAW 3, PACKET 10) is refused. A domain is compared as a 64-bit value: one
// whose upper half is not zero is refused, whatever the kernel would make of it.
// struct seccomp_data (include/uapi/linux/seccomp.h): nr at 0, arch at 4, args[i] at
// 16+8i, native byte order (little-endian on amd64 and arm64: the low half first).

// Offsets in struct seccomp_data.
const (
	seccompNR   = 0
	seccompArch = 4
	seccompArgs = 16
)

// x32SyscallBit marks x32 system call numbers on x86-64 (__X32_SYSCALL_BIT,
// arch/x86/include/uapi/asm/unistd.h).
const x32SyscallBit = 0x40000000

// A Policy is a seccomp filter as BPF instructions (golang.org/x/net/bpf), built by
// RunnerPolicy and VMMPolicy and installed by loadPolicy.
type Policy []bpf.Instruction

// errnoRet is the filter's return value that fails the call with errno.
func errnoRet(errno unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(errno)&0xffff }

// auditArch is the AUDIT_ARCH_* value of the architecture this binary is built for
// (include/uapi/linux/audit.h); 0 where brood has no filter.
func auditArch() uint32 {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64
	}
	return 0
}

// header checks the architecture (foreign: kill the process) and, on x86-64, refuses x32
// calls.
func header() Policy {
	p := Policy{
		bpf.LoadAbsolute{Off: seccompArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArch(), SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS},
	}
	if runtime.GOARCH == "amd64" {
		p = append(p,
			bpf.LoadAbsolute{Off: seccompNR, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallBit, SkipFalse: 1},
			bpf.RetConstant{Val: errnoRet(unix.ENOSYS)})
	}
	return p
}

// refuse returns ret for call nr. Every rule loads the call number itself.
func refuse(nr uintptr, ret uint32) Policy {
	return Policy{
		bpf.LoadAbsolute{Off: seccompNR, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 1},
		bpf.RetConstant{Val: ret},
	}
}

// refuseArgNot returns ret for call nr unless its argument arg, as a 64-bit value, is val.
func refuseArgNot(nr uintptr, arg int, val uint32, ret uint32) Policy {
	off := uint32(seccompArgs + 8*arg)
	return Policy{
		bpf.LoadAbsolute{Off: seccompNR, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 5},
		bpf.LoadAbsolute{Off: off + 4, Size: 4}, // upper half
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: 2},
		bpf.LoadAbsolute{Off: off, Size: 4}, // lower half
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: val, SkipTrue: 1},
		bpf.RetConstant{Val: ret},
	}
}

// refuseArgBits returns ret for call nr when argument arg has any of bits set (in its
// lower half: the kernel reads the argument as an int).
func refuseArgBits(nr uintptr, arg int, bits uint32, ret uint32) Policy {
	return Policy{
		bpf.LoadAbsolute{Off: seccompNR, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 3},
		bpf.LoadAbsolute{Off: uint32(seccompArgs + 8*arg), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: bits, SkipFalse: 1},
		bpf.RetConstant{Val: ret},
	}
}

// RunnerPolicy is the filter of every runner thread (see the comment above).
func RunnerPolicy() Policy {
	p := header()
	for _, nr := range []uintptr{unix.SYS_SOCKET, unix.SYS_SOCKETPAIR} {
		p = append(p, refuseArgNot(nr, 0, unix.AF_UNIX, errnoRet(unix.EAFNOSUPPORT))...)
		p = append(p, refuseArgBits(nr, 1, unix.SOCK_DGRAM, errnoRet(unix.EAFNOSUPPORT))...)
	}
	for _, nr := range []uintptr{unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER} {
		p = append(p, refuse(nr, errnoRet(unix.ENOSYS))...)
	}
	for _, nr := range []uintptr{unix.SYS_UNSHARE, unix.SYS_SETNS} {
		p = append(p, refuse(nr, errnoRet(unix.EPERM))...)
	}
	return append(p, bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW})
}

// VMMPolicy is the filter added on the thread that forks the VMM (see above).
func VMMPolicy() Policy {
	p := append(header(), refuse(unix.SYS_CONNECT, errnoRet(unix.EPERM))...)
	return append(p, bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW})
}

// loadPolicy installs p on the calling thread, or with allThreads on every thread of the
// process (SECCOMP_FILTER_FLAG_TSYNC), with seccomp(2). no_new_privs must be set already.
func loadPolicy(p Policy, allThreads bool) error {
	if auditArch() == 0 {
		return fmt.Errorf("seccomp: no filter for architecture %s: %w", runtime.GOARCH, ErrRunner)
	}
	raw, err := bpf.Assemble(p)
	if err != nil {
		return fmt.Errorf("seccomp: assemble filter: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	var flags uintptr
	if allThreads {
		flags = unix.SECCOMP_FILTER_FLAG_TSYNC
	}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	switch {
	case e != 0:
		return os.NewSyscallError("seccomp(SECCOMP_SET_MODE_FILTER)", e)
	case r != 0: // TSYNC: the thread that could not be synchronised
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): thread %d cannot take the filter: %w", r, ErrRunner)
	}
	return nil
}
