package egress

import (
	"fmt"
	"net"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// tapOnly confines a session socket fd (the DNS proxy's, the name gate's listeners) to
// what enters by the interface tap:
//
//   - SO_BINDTODEVICE tap (socket(7)): the socket lookup skips it for packets that arrive
//     on another interface (the uplink's LAN, another session's tap). A packet a local
//     process sends to the tap's address is routed over lo yet still matches it, so:
//   - a socket filter (SO_ATTACH_FILTER, classic BPF) that accepts only packets whose
//     receiving device (SKF_AD_IFINDEX, linux/filter.h) is the tap: local processes'
//     packets carry lo's index and are dropped before the proxy reads them. On a TCP
//     listener the filter runs on every SYN and is inherited by accepted connections.
//   - SO_LOCK_FILTER, so the filter cannot be detached or replaced on this socket later
//     (nor by the unprivileged process it may be handed to).
func tapOnly(fd int, tap string) error {
	ifi, err := net.InterfaceByName(tap)
	if err != nil {
		return fmt.Errorf("restrict DNS proxy socket to tap %s: %w", tap, err)
	}
	if err := unix.BindToDevice(fd, tap); err != nil {
		return fmt.Errorf("bind DNS proxy socket to tap %s: %w", tap, err)
	}
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtInterfaceIndex},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(ifi.Index), SkipFalse: 1},
		bpf.RetConstant{Val: 0xffff_ffff}, // accept, whole packet
		bpf.RetConstant{Val: 0},           // drop
	})
	if err != nil {
		return fmt.Errorf("assemble tap filter for %s: %w", tap, err)
	}
	filters := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		filters[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog); err != nil {
		return fmt.Errorf("attach tap filter for %s: %w", tap, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_LOCK_FILTER, 1); err != nil {
		return fmt.Errorf("lock tap filter for %s: %w", tap, err)
	}
	return nil
}
