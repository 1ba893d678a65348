//go:build !linux

package namegate

import (
	"errors"
	"net"
	"net/netip"
)

// OriginalDst needs conntrack (Linux): elsewhere it always fails.
func OriginalDst(*net.TCPConn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("original destination: conntrack exists on Linux only")
}
