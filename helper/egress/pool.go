package egress

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox"
)

// addrPool hands out slot i of the pools: the IPv4 /30 PoolV4+4i (host .1, guest .2)
// and the IPv6 /126 PoolV6+4i (host ::1, guest ::2). Slots are reused once released.
type addrPool struct {
	v4, v6 netip.Prefix
	slots  int // number of slots: the smaller pool's count of /30 or /126, at most 65536

	mu   sync.Mutex
	used map[int]bool
}

// maxSlots bounds the pool (more sessions than this on one host are not meaningful).
const maxSlots = 1 << 16

func newAddrPool(v4, v6 string) (*addrPool, error) {
	p4, err := netip.ParsePrefix(v4)
	if err != nil || !p4.Addr().Is4() || p4.Bits() > 30 || p4.Masked() != p4 {
		return nil, fmt.Errorf("egress.pool_v4 %q is not an IPv4 network of /30 or larger: %w", v4, ErrConfig)
	}
	p6, err := netip.ParsePrefix(v6)
	if err != nil || !p6.Addr().Is6() || p6.Addr().Is4In6() || p6.Bits() > 126 || p6.Masked() != p6 {
		return nil, fmt.Errorf("egress.pool_v6 %q is not an IPv6 network of /126 or larger: %w", v6, ErrConfig)
	}
	n := min(1<<min(30-p4.Bits(), 16), 1<<min(126-p6.Bits(), 16), maxSlots)
	return &addrPool{v4: p4, v6: p6, slots: n, used: map[int]bool{}}, nil
}

// Addrs are the addresses of one session's link.
type Addrs struct {
	Host4, Guest4 netip.Addr // .1 and .2 of the /30
	Host6, Guest6 netip.Addr // ::1 and ::2 of the /126
	Net4, Net6    netip.Prefix
	// GuestLL is the guest's IPv6 link-local address, which its kernel derives from the
	// NIC's MAC (sandbox.DefaultMAC; every guest has it, each on its own tap).
	GuestLL netip.Addr
}

// guestLL is the link-local address of a NIC with sandbox.DefaultMAC.
var guestLL = linkLocalEUI64(sandbox.DefaultMAC)

// linkLocalEUI64 returns fe80::/64 with the modified EUI-64 interface identifier of a
// 48-bit MAC (RFC 4291 appendix A: ff:fe in the middle, the universal/local bit flipped),
// the address Linux gives an interface with addr_gen_mode 0 (eui64, the default). A
// string that is not a 48-bit MAC gives the zero Addr.
func linkLocalEUI64(mac string) netip.Addr {
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 {
		return netip.Addr{}
	}
	a := [16]byte{0: 0xfe, 1: 0x80, 8: hw[0] ^ 0x02, 9: hw[1], 10: hw[2], 11: 0xff, 12: 0xfe, 13: hw[3], 14: hw[4], 15: hw[5]}
	return netip.AddrFrom16(a)
}

func (p *addrPool) addrs(slot int) Addrs {
	b4 := p.v4.Addr().As4()
	v := uint32(b4[0])<<24 | uint32(b4[1])<<16 | uint32(b4[2])<<8 | uint32(b4[3])
	v += uint32(slot) * 4
	at4 := func(off uint32) netip.Addr {
		x := v + off
		return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)})
	}
	b6 := p.v6.Addr().As16()
	at6 := func(off uint32) netip.Addr {
		a := b6
		x := uint32(a[12])<<24 | uint32(a[13])<<16 | uint32(a[14])<<8 | uint32(a[15])
		x += uint32(slot)*4 + off
		a[12], a[13], a[14], a[15] = byte(x>>24), byte(x>>16), byte(x>>8), byte(x)
		return netip.AddrFrom16(a)
	}
	return Addrs{
		Host4: at4(1), Guest4: at4(2), Net4: netip.PrefixFrom(at4(0), 30),
		Host6: at6(1), Guest6: at6(2), Net6: netip.PrefixFrom(at6(0), 126),
		GuestLL: guestLL,
	}
}

// take returns the lowest free slot, or api.ErrLimit when all are used.
func (p *addrPool) take() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.slots {
		if !p.used[i] {
			p.used[i] = true
			return i, nil
		}
	}
	return 0, fmt.Errorf("egress address pool %s, %s: all %d slots in use: %w", p.v4, p.v6, p.slots, api.ErrLimit)
}

func (p *addrPool) release(slot int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.used, slot)
}
