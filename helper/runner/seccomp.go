package runner

import (
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
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
//     sendto(2) any pathname datagram socket its uid may write: EAFNOSUPPORT too); no io_uring
//     (ENOSYS: its socket and connect operations are not system calls a filter sees; QEMU
//     falls back to ppoll); no unshare(2) or setns(2) (EPERM: the runner runs in a user
//     namespace of its own, package spawner, and must not make more namespaces, each a
//     new set of capabilities over new kernel objects).
//   - VMMPolicy, on the one thread that forks QEMU only: no connect(2) at all (EPERM).
//     QEMU only listens (its SSH chardev is a server socket); a connect could reach the
//     developer's ssh-agent or session bus, which Landlock (ABI 7) cannot refuse: pathname
//     unix sockets are outside its filesystem rights.
//
// Numbers: AF_UNIX = 1, SOCK_DGRAM = 2 (include/linux/socket.h, include/linux/net.h);
// AF_UNIX turns SOCK_RAW (3) into SOCK_DGRAM (net/unix/af_unix.c), and every type with bit
// 2 set (DGRAM 2, RAW 3, PACKET 10) is refused. Arguments are compared as 64-bit values: a
// domain whose upper bits are not zero is refused, whatever the kernel would make of it.

// errnoAction is the seccomp action that fails the call with errno.
func errnoAction(errno unix.Errno) seccomp.Action {
	return seccomp.ActionErrno | seccomp.Action(errno)
}

// socketCalls are the calls that create sockets (domain in argument 0, type in 1).
var socketCalls = []string{"socket", "socketpair"}

// RunnerPolicy is the filter of every runner thread (see the comment above).
//
// Its layout works around go-seccomp-bpf (v1.6.0): after it compares a call's arguments
// the BPF accumulator holds the last argument, not the call number, and the groups after
// it compare call numbers against that argument. So each call is named in one group only,
// unconditional groups come first and the one conditional group last (a clobbered
// accumulator then only reaches the default action), and the two socket conditions (any
// other family, or a datagram type) are alternatives of that group, sharing its errno.
func RunnerPolicy() seccomp.Policy {
	var sockets []seccomp.NameWithConditions
	for _, c := range socketCalls {
		sockets = append(sockets,
			seccomp.NameWithConditions{Name: c, Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX}}},
			seccomp.NameWithConditions{Name: c, Conditions: seccomp.ArgumentConditions{
				{Argument: 1, Operation: seccomp.BitsSet, Value: unix.SOCK_DGRAM}}})
	}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Names: []string{"io_uring_setup", "io_uring_enter", "io_uring_register"}, Action: errnoAction(unix.ENOSYS)},
			{Names: []string{"unshare", "setns"}, Action: errnoAction(unix.EPERM)},
			{NamesWithCondtions: sockets, Action: errnoAction(unix.EAFNOSUPPORT)},
		},
	}
}

// VMMPolicy is the filter added on the thread that forks the VMM (see above).
func VMMPolicy() seccomp.Policy {
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Names: []string{"connect"}, Action: errnoAction(unix.EPERM)},
		},
	}
}

// loadPolicy installs p on the calling thread, or with allThreads on every thread of the
// process (SECCOMP_FILTER_FLAG_TSYNC). no_new_privs must be set already.
func loadPolicy(p seccomp.Policy, allThreads bool) error {
	f := seccomp.Filter{Policy: p}
	if allThreads {
		f.Flag = seccomp.FilterFlagTSync
	}
	if err := seccomp.LoadFilter(f); err != nil {
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER): %w", err)
	}
	return nil
}
