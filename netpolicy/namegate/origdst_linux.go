//go:build linux

package namegate

import (
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST (include/uapi/linux/netfilter_ipv6/
// ip6_tables.h, 80); the IPv4 option is SO_ORIGINAL_DST (include/uapi/linux/
// netfilter_ipv4.h, also 80), both answered by conntrack from the connection's original
// tuple (net/netfilter/nf_conntrack_proto.c).
const ip6tSOOriginalDst = 80

// OriginalDst returns the destination a redirected (DNAT) TCP connection was sent to
// before the nat rule rewrote it: getsockopt SO_ORIGINAL_DST (IPv4) or
// IP6T_SO_ORIGINAL_DST (IPv6). A connection that was not translated gives its own local
// address; one without a conntrack entry fails with ENOENT.
func OriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	la, _ := c.LocalAddr().(*net.TCPAddr)
	v6 := la != nil && la.IP.To4() == nil
	var ap netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		if v6 {
			var sa unix.RawSockaddrInet6
			n := uint32(unsafe.Sizeof(sa))
			serr = getsockopt(int(fd), unix.SOL_IPV6, ip6tSOOriginalDst, unsafe.Pointer(&sa), &n)
			ap = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), ntohs(sa.Port))
			return
		}
		var sa unix.RawSockaddrInet4
		n := uint32(unsafe.Sizeof(sa))
		serr = getsockopt(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST, unsafe.Pointer(&sa), &n)
		ap = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), ntohs(sa.Port))
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination (getsockopt SO_ORIGINAL_DST): %w", err)
	}
	return ap, nil
}

func getsockopt(fd, level, opt int, p unsafe.Pointer, n *uint32) error {
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(n)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// ntohs reads a port as the sockaddr holds it (network byte order).
func ntohs(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}
