//go:build linux

package nftrules

import (
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"brood.dev/brood/netpolicy"
)

// Names of the table-wide sets, maps and chains (the table is TableName).
const (
	RefusedV4Name = "refused_v4"
	RefusedV6Name = "refused_v6"
	FwdMapName    = "fwd_taps"
	InMapName     = "in_taps"
	NATMapName    = "nat_taps"
	FwdChainName  = "tap_forward"
	InChainName   = "tap_input"
	PreChainName  = "tap_prerouting"
)

// GatedPorts are the TCP ports a gated session's connections to pinned addresses are
// redirected on to its name gate: HTTPS (SNI) and HTTP (Host).
var GatedPorts = []uint16{80, 443}

// QUICPort is the UDP port a gated session may never send to (HTTP/3, RFC 9114): QUIC
// carries its name where the gate cannot hold the connection, so it is rejected with
// ICMP port unreachable and clients fall back to TCP at once.
const QUICPort = 443

// Ports dropped from a tap unless sent to the session's proxy: DNS (53), DNS over TLS (853,
// RFC 7858), mDNS (5353, RFC 6762), LLMNR (5355, RFC 4795).
var DNSPorts = []uint16{53, 853, 5353, 5355}

// Reject log rate: at most 10 log lines a minute per chain, bursts of 5.
const (
	logRatePerMinute = 10
	logBurst         = 5
)

// Set is a set with the elements it is created with.
type Set struct {
	Set      *nftables.Set
	Elements []nftables.SetElement
}

// Ruleset is a batch of nftables objects to add, in order: table, sets, chains, rules,
// then elements of sets that already exist (or were created earlier in the batch).
type Ruleset struct {
	Table    *nftables.Table
	Sets     []Set
	Chains   []*nftables.Chain
	Rules    []*nftables.Rule
	Elements []Set
}

// Session describes one session's egress for SessionRuleset.
type Session struct {
	// ID is 1–12 lower-case letters and digits; the tap is TapPrefix+ID.
	ID string
	// ProxyV4 and ProxyV6 are the host-side addresses of the tap where the session's DNS
	// proxy listens; at least one is required (the other may be the zero Addr).
	ProxyV4, ProxyV6 netip.Addr
	// GuestV4, GuestV6 and GuestLL are the guest's own addresses: its IPv4 and IPv6
	// addresses on the link and its IPv6 link-local address. The first rules of both
	// session chains drop every packet from the tap with another source address (so a
	// guest cannot send as another guest or as the host); a zero Addr admits no source of
	// its kind (no GuestV4: every IPv4 packet is dropped).
	GuestV4, GuestV6, GuestLL netip.Addr
	// AnyPort (Permissive) accepts every destination not refused, pinned or not.
	AnyPort bool
	// Refused are this session's refused destinations beyond the table's refused ranges
	// (for permissive: the uplinks' connected prefixes and the host's routed networks);
	// they get the sets s<id>_r4 / s<id>_r6 and are rejected like the refused ranges.
	Refused []netip.Prefix
	// GatePort4 and GatePort6 are the TCP ports of the session's name gate on ProxyV4 and
	// ProxyV6. When set (and not AnyPort), a new TCP connection from the tap to a pinned
	// address on a GatedPorts port is redirected (DNAT) to the gate, which only the
	// redirected connections may reach (ct status dnat); UDP to QUICPort is rejected
	// whenever AnyPort is off. Zero: no redirect for that family.
	GatePort4, GatePort6 uint16
}

// Gated reports whether s's TCP 80/443 connections pass its name gate.
func (s Session) Gated() bool { return !s.AnyPort && (s.GatePort4 != 0 || s.GatePort6 != 0) }

// Table returns the brood table value.
func Table() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}
}

// setIDs numbers the sets this process creates; the kernel resolves anonymous sets by this
// id within one transaction.
var setIDs atomic.Uint32

func init() { setIDs.Store(1 << 20) } // clear of google/nftables' own counter

func newSetID() uint32 { return setIDs.Add(1) }

// BaseRuleset returns the table, its refused sets, the tap dispatch maps, the held-uplink
// sets and the two base chains.
func BaseRuleset() *Ruleset {
	t := Table()
	v4, v6 := netpolicy.RefusedPrefixes()
	rs := &Ruleset{
		Table: t,
		Sets: []Set{
			{&nftables.Set{Table: t, ID: newSetID(), Name: RefusedV4Name, KeyType: nftables.TypeIPAddr, Interval: true}, intervalElements(v4)},
			{&nftables.Set{Table: t, ID: newSetID(), Name: RefusedV6Name, KeyType: nftables.TypeIP6Addr, Interval: true}, intervalElements(v6)},
			{Set: tapMap(FwdMapName)},
			{Set: tapMap(InMapName)},
			{Set: heldSet(HeldV4Name)},
			{Set: heldSet(HeldV6Name)},
			{Set: tapMap(NATMapName)},
		},
	}
	for _, x := range rs.Sets[2:] {
		x.Set.ID = newSetID()
	}
	accept := nftables.ChainPolicyAccept
	fwd := &nftables.Chain{Table: t, Name: FwdChainName, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept}
	in := &nftables.Chain{Table: t, Name: InChainName, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept}
	pre := &nftables.Chain{Table: t, Name: PreChainName, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept}
	rs.Chains = []*nftables.Chain{fwd, in, pre}
	b := &builder{rs: rs}
	anyOif := ifMatch(expr.MetaKeyOIFNAME, []byte(TapPrefix))
	anyIif := ifMatch(expr.MetaKeyIIFNAME, []byte(TapPrefix))
	b.rule(fwd, anyOif, ctEstablished(), verdict(expr.VerdictAccept))
	b.rule(fwd, anyOif, counter(), verdict(expr.VerdictDrop))
	b.rule(fwd, vmap(expr.MetaKeyIIFNAME, rs.Sets[2].Set))
	b.rule(fwd, anyIif, counter(), verdict(expr.VerdictDrop))
	heldRules(b, fwd, rs.Sets[4].Set, rs.Sets[5].Set)
	b.rule(in, vmap(expr.MetaKeyIIFNAME, rs.Sets[3].Set))
	b.rule(in, anyIif, counter(), verdict(expr.VerdictDrop))
	b.rule(pre, vmap(expr.MetaKeyIIFNAME, rs.Sets[6].Set))
	return rs
}

// tapMap returns a dispatch map: tap name (ifname, 16 bytes) to verdict.
func tapMap(name string) *nftables.Set {
	// The key byte order goes into the set's userdata, from which nft learns how to print
	// the keys (nft declares strings host-endian); the kernel ignores it.
	return &nftables.Set{Table: Table(), Name: name, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict,
		KeyByteOrder: nativeEndian()}
}

// nativeEndian is the byte order nft declares for ifname keys (strings are host-endian).
func nativeEndian() binaryutil.ByteOrder { return binaryutil.NativeEndian }

// vmap is `<key> vmap @m`.
func vmap(key expr.MetaKey, m *nftables.Set) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1},
		&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: m.Name, SetID: m.ID}}
}

// intervalElements encodes disjoint sorted prefixes as interval set elements the way nft
// 1.0 does (compare testdata/session.netlink): a start element per prefix and an end element
// (flag INTERVAL_END) at the first address after it, none after a prefix reaching the top of
// the address space, adjacent prefixes not merged, and a leading end element at the zero
// address when the first prefix does not start there.
func intervalElements(ps []netip.Prefix) []nftables.SetElement {
	type rng struct{ lo, next netip.Addr } // next: first address after the range; invalid at the top
	var rs []rng
	for _, p := range ps {
		lo := p.Masked().Addr()
		rs = append(rs, rng{lo, lastOf(p).Next()})
	}
	var els []nftables.SetElement
	if len(rs) > 0 && !rs[0].lo.IsUnspecified() {
		els = append(els, nftables.SetElement{Key: make([]byte, rs[0].lo.BitLen()/8), IntervalEnd: true})
	}
	for _, r := range rs {
		els = append(els, nftables.SetElement{Key: r.lo.AsSlice()})
		if r.next.IsValid() {
			els = append(els, nftables.SetElement{Key: r.next.AsSlice(), IntervalEnd: true})
		}
	}
	return els
}

func lastOf(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// SetNames returns the names of session id's sets (IPv4, IPv6).
func SetNames(id string) (v4, v6 string) { return "s" + id + "_v4", "s" + id + "_v6" }

// ChainNames returns the names of session id's chains (forward, input).
func ChainNames(id string) (fwd, in string) { return "s" + id + "_fwd", "s" + id + "_in" }

// NATChainNameOf returns the name of session id's redirect chain (jumped to from
// tap_prerouting; only a gated session has one).
func NATChainNameOf(id string) string { return "s" + id + "_nat" }

// Key types of the session sets: address . inet_proto . inet_service.
var (
	pinKey4 = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	pinKey6 = nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)
)

// SessionSets returns session id's two pin sets (address . protocol . port, flags timeout).
func SessionSets(id string) (v4, v6 *nftables.Set) {
	n4, n6 := SetNames(id)
	t := Table()
	return &nftables.Set{Table: t, Name: n4, KeyType: pinKey4, Concatenation: true, HasTimeout: true},
		&nftables.Set{Table: t, Name: n6, KeyType: pinKey6, Concatenation: true, HasTimeout: true}
}

// PinKey returns the set element key of a pin: the address, then the protocol number and
// the port (network byte order), each padded to a 4-byte register as nft lays out
// concatenations.
func PinKey(a netip.Addr, p netpolicy.Port) []byte {
	proto := byte(unix.IPPROTO_TCP)
	if p.Proto == netpolicy.UDP {
		proto = unix.IPPROTO_UDP
	}
	return append(a.AsSlice(), proto, 0, 0, 0, byte(p.Num>>8), byte(p.Num), 0, 0)
}

// SessionRuleset returns the sets, chains, rules and dispatch map elements of one session
// (not the table: see BaseRuleset). Errors wrap ErrBadSession or ErrBadIfName.
func SessionRuleset(s Session) (*Ruleset, error) {
	tap, err := TapName(s.ID)
	if err != nil {
		return nil, err
	}
	if err := checkSessionAddrs(s); err != nil {
		return nil, err
	}
	tapKey, err := IfNameBytes(tap)
	if err != nil {
		return nil, err
	}
	t := Table()
	v4, v6 := SessionSets(s.ID)
	v4.ID, v6.ID = newSetID(), newSetID()
	fwdName, inName := ChainNames(s.ID)
	fwd := &nftables.Chain{Table: t, Name: fwdName}
	in := &nftables.Chain{Table: t, Name: inName}
	rs := &Ruleset{Table: t, Sets: []Set{{Set: v4}, {Set: v6}}, Chains: []*nftables.Chain{fwd, in}}
	b := &builder{rs: rs}
	logPrefix := "brood s" + s.ID + " reject: "

	// Forward: the guest's own traffic (replies to it are handled in tap_forward).
	b.sourceRules(fwd, s)
	b.rule(fwd, ctEstablished(), verdict(expr.VerdictAccept))
	b.rule(fwd, b.anonLookup(expr.MetaKeyL4PROTO, nftables.TypeInetProto, [][]byte{{unix.IPPROTO_TCP}, {unix.IPPROTO_UDP}}),
		b.thDportIn(DNSPorts), counter(), verdict(expr.VerdictDrop))
	b.quicReject(fwd, s)
	b.rule(fwd, nfproto(unix.NFPROTO_IPV4), daddr4(), lookup(RefusedV4Name, 0), counter(), rejectAdmin())
	b.rule(fwd, nfproto(unix.NFPROTO_IPV6), daddr6(), lookup(RefusedV6Name, 0), counter(), rejectAdmin())
	b.sessionRefused(fwd, s)
	if s.AnyPort {
		b.rule(fwd, verdict(expr.VerdictAccept))
	} else {
		// Registers as nft allocates them for the concatenation (compare
		// testdata/session.netlink): the address in 128-bit register 1, the protocol and port
		// in the following 32-bit registers (NFT_REG32_01 = 9 ...; for IPv6 NFT_REG_2 = 2
		// aliases NFT_REG32_04).
		b.rule(fwd, nfproto(unix.NFPROTO_IPV4), daddr4(),
			[]expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 9},
				&expr.Payload{DestRegister: 10, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}},
			lookup(v4.Name, v4.ID), verdict(expr.VerdictAccept))
		b.rule(fwd, nfproto(unix.NFPROTO_IPV6), daddr6(),
			[]expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 2},
				&expr.Payload{DestRegister: 13, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}},
			lookup(v6.Name, v6.ID), verdict(expr.VerdictAccept))
	}
	b.rule(fwd, rateLimit(), logExpr(logPrefix))
	b.rule(fwd, counter(), rejectAdmin())

	// Input: only DNS to the proxy (and IPv6 neighbour discovery) reaches the host.
	b.sourceRules(in, s)
	b.rule(in, ctEstablished(), verdict(expr.VerdictAccept))
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		if s.ProxyV4.IsValid() {
			b.rule(in, nfproto(unix.NFPROTO_IPV4), daddr4(), cmpEq(s.ProxyV4.AsSlice()), l4proto(proto), b.thDport([]uint16{53}), verdict(expr.VerdictAccept))
		}
		if s.ProxyV6.IsValid() {
			b.rule(in, nfproto(unix.NFPROTO_IPV6), daddr6(), cmpEq(s.ProxyV6.AsSlice()), l4proto(proto), b.thDport([]uint16{53}), verdict(expr.VerdictAccept))
		}
	}
	if s.Gated() {
		b.gateInput(in, s)
	}
	// RFC 4861 types 133 router solicitation, 135/136 neighbour solicitation/advertisement.
	b.rule(in, nfproto(unix.NFPROTO_IPV6), l4proto(unix.IPPROTO_ICMPV6),
		[]expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1}},
		b.anonSet(nftables.TypeICMP6Type, [][]byte{{133}, {135}, {136}}), verdict(expr.VerdictAccept))
	b.rule(in, rateLimit(), logExpr(logPrefix))
	b.rule(in, counter(), rejectAdmin())

	rs.Elements = []Set{
		{tapMap(FwdMapName), []nftables.SetElement{{Key: tapKey, VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: fwdName}}}},
		{tapMap(InMapName), []nftables.SetElement{{Key: tapKey, VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: inName}}}},
	}
	if s.Gated() {
		b.gateChain(s, tapKey, v4, v6)
	}
	return rs, nil
}

// quicReject adds, unless s is AnyPort, `udp dport 443 counter reject with icmpx type
// port-unreachable` to chain c.
func (b *builder) quicReject(c *nftables.Chain, s Session) {
	if !s.AnyPort {
		b.rule(c, l4proto(unix.IPPROTO_UDP), b.thDport([]uint16{QUICPort}), counter(), rejectPortUnreachable())
	}
}

// gateChain adds a gated session's redirect chain s<id>_nat (gateRedirect) and its
// nat_taps element.
func (b *builder) gateChain(s Session, tapKey []byte, v4, v6 *nftables.Set) {
	nat := &nftables.Chain{Table: b.rs.Table, Name: NATChainNameOf(s.ID)}
	b.rs.Chains = append(b.rs.Chains, nat)
	b.gateRedirect(nat, s, v4, v6)
	b.rs.Elements = append(b.rs.Elements, Set{tapMap(NATMapName),
		[]nftables.SetElement{{Key: tapKey, VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: nat.Name}}}})
}

// gateRedirect adds to chain c (reached from tap_prerouting, hook prerouting, type nat)
// the redirect of new TCP connections to a pinned address on GatedPorts to the gate:
//
//	meta l4proto tcp th dport { 80, 443 } ip daddr . meta l4proto . th dport @s<id>_v4 dnat ip to PROXY4:GATE4
//	meta l4proto tcp th dport { 80, 443 } ip6 daddr . meta l4proto . th dport @s<id>_v6 dnat ip6 to [PROXY6]:GATE6
//
// A connection to an address that is not pinned on that port is not redirected: the
// forward chain rejects it as before. Registers as nft allocates them (testdata).
func (b *builder) gateRedirect(c *nftables.Chain, s Session, v4, v6 *nftables.Set) {
	tcpGated := func() [][]expr.Any { return [][]expr.Any{l4proto(unix.IPPROTO_TCP), b.thDportIn(GatedPorts)} }
	if s.GatePort4 != 0 && s.ProxyV4.IsValid() {
		b.rule(c, append(tcpGated(), nfproto(unix.NFPROTO_IPV4), daddr4(),
			[]expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 9},
				&expr.Payload{DestRegister: 10, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}},
			lookup(v4.Name, v4.ID), dnatTo(unix.NFPROTO_IPV4, s.ProxyV4, s.GatePort4))...)
	}
	if s.GatePort6 != 0 && s.ProxyV6.IsValid() {
		b.rule(c, append(tcpGated(), nfproto(unix.NFPROTO_IPV6), daddr6(),
			[]expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 2},
				&expr.Payload{DestRegister: 13, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}},
			lookup(v6.Name, v6.ID), dnatTo(unix.NFPROTO_IPV6, s.ProxyV6, s.GatePort6))...)
	}
}

// gateInput adds to the session's input chain c the accept of redirected connections to
// the gate, and of nothing else on its ports:
//
//	ip daddr PROXY4 tcp dport GATE4 ct status dnat accept;  ip6 likewise
func (b *builder) gateInput(c *nftables.Chain, s Session) {
	for _, g := range []struct {
		fam  byte
		addr netip.Addr
		port uint16
		load func() []expr.Any
	}{{unix.NFPROTO_IPV4, s.ProxyV4, s.GatePort4, daddr4}, {unix.NFPROTO_IPV6, s.ProxyV6, s.GatePort6, daddr6}} {
		if g.port == 0 || !g.addr.IsValid() {
			continue
		}
		b.rule(c, nfproto(g.fam), g.load(), cmpEq(g.addr.AsSlice()), l4proto(unix.IPPROTO_TCP), b.thDport([]uint16{g.port}),
			ctStatusDNAT(), verdict(expr.VerdictAccept))
	}
}

// dnatTo is `dnat ip to ADDR:PORT` (ip6 for an IPv6 family): both in registers 1 and 2,
// NF_NAT_RANGE_PROTO_SPECIFIED (flags 0x2).
func dnatTo(fam byte, a netip.Addr, port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: a.AsSlice()},
		&expr.Immediate{Register: 2, Data: be16(port)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(fam), RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	}
}

// ipsDstNAT is IPS_DST_NAT (1 << IPS_DST_NAT_BIT, bit 5) of
// include/uapi/linux/netfilter/nf_conntrack_common.h.
const ipsDstNAT = 1 << 5

// ctStatusDNAT is `ct status dnat`: the connection's destination was translated
// (IPS_DST_NAT, include/uapi/linux/netfilter/nf_conntrack_common.h; a host-endian u32).
func ctStatusDNAT() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

// RefusedSetNames returns the names of session id's own refused sets (IPv4, IPv6).
func RefusedSetNames(id string) (v4, v6 string) { return "s" + id + "_r4", "s" + id + "_r6" }

// sessionRefused adds, when s has Refused prefixes or is AnyPort (whose refused networks
// Firewall.SetRefused keeps current), the interval sets s<id>_r4 / _r6 with them and the
// rules `ip daddr @s<id>_r4 counter reject` and the IPv6 one to chain c.
func (b *builder) sessionRefused(c *nftables.Chain, s Session) {
	if len(s.Refused) == 0 && !s.AnyPort {
		return
	}
	p4, p6 := splitFamilies(s.Refused)
	n4, n6 := RefusedSetNames(s.ID)
	r4 := &nftables.Set{Table: b.rs.Table, ID: newSetID(), Name: n4, KeyType: nftables.TypeIPAddr, Interval: true}
	r6 := &nftables.Set{Table: b.rs.Table, ID: newSetID(), Name: n6, KeyType: nftables.TypeIP6Addr, Interval: true}
	b.rs.Sets = append(b.rs.Sets, Set{r4, intervalElements(p4)}, Set{r6, intervalElements(p6)})
	b.rule(c, nfproto(unix.NFPROTO_IPV4), daddr4(), lookup(r4.Name, r4.ID), counter(), rejectAdmin())
	b.rule(c, nfproto(unix.NFPROTO_IPV6), daddr6(), lookup(r6.Name, r6.ID), counter(), rejectAdmin())
}

// disjoint returns masked prefixes of one family sorted by address with every prefix
// inside another one dropped (two prefixes are nested or disjoint), as interval sets need.
func disjoint(ps []netip.Prefix) []netip.Prefix {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out []netip.Prefix
	for _, p := range ps {
		if len(out) > 0 && out[len(out)-1].Overlaps(p) {
			continue // sorted: the earlier, shorter one contains p
		}
		out = append(out, p)
	}
	return out
}

// checkSessionAddrs requires at least one proxy address, each of its family, valid
// guest addresses (checkGuestAddrs) and valid, unzoned, unmapped refused prefixes.
// Errors wrap ErrBadSession.
func checkSessionAddrs(s Session) error {
	if !s.ProxyV4.IsValid() && !s.ProxyV6.IsValid() {
		return fmt.Errorf("session %s: no proxy address: %w", s.ID, ErrBadSession)
	}
	if (s.ProxyV4.IsValid() && !s.ProxyV4.Is4()) || (s.ProxyV6.IsValid() && (!s.ProxyV6.Is6() || s.ProxyV6.Is4In6() || s.ProxyV6.Zone() != "")) {
		return fmt.Errorf("session %s: proxy addresses %v, %v: %w", s.ID, s.ProxyV4, s.ProxyV6, ErrBadSession)
	}
	if err := checkGuestAddrs(s); err != nil {
		return err
	}
	for _, p := range s.Refused {
		if !p.IsValid() || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			return fmt.Errorf("session %s: refused prefix %v: %w", s.ID, p, ErrBadSession)
		}
	}
	return nil
}

// checkGuestAddrs requires each valid guest address of s to be of its kind: GuestV4 IPv4,
// GuestV6 IPv6 and not link-local, GuestLL IPv6 link-local unicast, none zoned or
// IPv4-mapped. Errors wrap ErrBadSession.
func checkGuestAddrs(s Session) error {
	bad := func(a netip.Addr, ok bool) bool { return a.IsValid() && (!ok || a.Zone() != "" || a.Is4In6()) }
	if bad(s.GuestV4, s.GuestV4.Is4()) || bad(s.GuestV6, s.GuestV6.Is6() && !s.GuestV6.IsLinkLocalUnicast()) ||
		bad(s.GuestLL, s.GuestLL.Is6() && s.GuestLL.IsLinkLocalUnicast()) {
		return fmt.Errorf("session %s: guest addresses %v, %v, %v: %w", s.ID, s.GuestV4, s.GuestV6, s.GuestLL, ErrBadSession)
	}
	return nil
}

// sourceRules adds the source-address check to chain c: `ip saddr != GuestV4 counter
// drop` and `ip6 saddr != { GuestV6, GuestLL } counter drop` (a plain comparison for one
// address; `meta nfproto ipvN counter drop` for none).
func (b *builder) sourceRules(c *nftables.Chain, s Session) {
	drop := [][]expr.Any{counter(), verdict(expr.VerdictDrop)}
	if s.GuestV4.IsValid() {
		b.rule(c, append([][]expr.Any{nfproto(unix.NFPROTO_IPV4), saddr4(), cmpNeq(s.GuestV4.AsSlice())}, drop...)...)
	} else {
		b.rule(c, append([][]expr.Any{nfproto(unix.NFPROTO_IPV4)}, drop...)...)
	}
	var own [][]byte
	for _, a := range []netip.Addr{s.GuestV6, s.GuestLL} {
		if a.IsValid() {
			own = append(own, a.AsSlice())
		}
	}
	match := [][]expr.Any{nfproto(unix.NFPROTO_IPV6)}
	switch len(own) {
	case 0:
	case 1:
		match = append(match, saddr6(), cmpNeq(own[0]))
	default:
		lookup := b.anonSet(nftables.TypeIP6Addr, own)
		lookup[0].(*expr.Lookup).Invert = true
		match = append(match, saddr6(), lookup)
	}
	b.rule(c, append(match, drop...)...)
}

// builder appends rules and the anonymous sets they use to a Ruleset.
type builder struct {
	rs *Ruleset
}

func (b *builder) rule(c *nftables.Chain, parts ...[]expr.Any) {
	var exprs []expr.Any
	for _, p := range parts {
		exprs = append(exprs, p...)
	}
	b.rs.Rules = append(b.rs.Rules, &nftables.Rule{Table: c.Table, Chain: c, Exprs: exprs})
}

// anonSet adds a constant anonymous set and returns a lookup of register 1 in it.
func (b *builder) anonSet(typ nftables.SetDatatype, keys [][]byte) []expr.Any {
	s := &nftables.Set{Table: b.rs.Table, ID: newSetID(), Name: "__set%d", Anonymous: true, Constant: true, KeyType: typ}
	var els []nftables.SetElement
	for _, k := range keys {
		els = append(els, nftables.SetElement{Key: k})
	}
	b.rs.Sets = append(b.rs.Sets, Set{s, els})
	return lookup(s.Name, s.ID)
}

func (b *builder) anonLookup(key expr.MetaKey, typ nftables.SetDatatype, keys [][]byte) []expr.Any {
	return append([]expr.Any{&expr.Meta{Key: key, Register: 1}}, b.anonSet(typ, keys)...)
}

// thDport matches the transport header's destination port (bytes 2–3 of TCP and UDP) against
// one port or an anonymous set of them.
func (b *builder) thDport(ports []uint16) []expr.Any {
	load := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}}
	if len(ports) == 1 {
		return append(load, cmpEq(be16(ports[0]))...)
	}
	return b.thDportIn(ports)
}

func (b *builder) thDportIn(ports []uint16) []expr.Any {
	var keys [][]byte
	for _, p := range ports {
		keys = append(keys, be16(p))
	}
	load := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}}
	return append(load, b.anonSet(nftables.TypeInetService, keys)...)
}

func be16(v uint16) []byte { return []byte{byte(v >> 8), byte(v)} }

func ifMatch(key expr.MetaKey, name []byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name}}
}

func ctEstablished() []expr.Any {
	bits := expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		// ct state is a host-endian u32 (include/net/netfilter/nf_conntrack_common.h).
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

func nfproto(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

// daddr4/daddr6 load the destination address: IPv4 header bytes 16–19, IPv6 bytes 24–39.
func daddr4() []expr.Any {
	return []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}}
}

func daddr6() []expr.Any {
	return []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16}}
}

// saddr4/saddr6 load the source address: IPv4 header bytes 12–15, IPv6 bytes 8–23.
func saddr4() []expr.Any {
	return []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}}
}

func saddr6() []expr.Any {
	return []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 8, Len: 16}}
}

func cmpNeq(data []byte) []expr.Any {
	return []expr.Any{&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: data}}
}

func lookup(name string, id uint32) []expr.Any {
	return []expr.Any{&expr.Lookup{SourceRegister: 1, SetName: name, SetID: id}}
}

func cmpEq(data []byte) []expr.Any {
	return []expr.Any{&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data}}
}

func counter() []expr.Any { return []expr.Any{&expr.Counter{}} }

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

// rejectAdmin is `reject with icmpx type admin-prohibited`: the connecting guest gets an
// immediate error instead of a timeout.
func rejectAdmin() []expr.Any {
	return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}}
}

// rejectPortUnreachable is `reject with icmpx type port-unreachable`: what a closed UDP
// port answers, so a QUIC client falls back to TCP at once.
func rejectPortUnreachable() []expr.Any {
	return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_PORT_UNREACH}}
}

func rateLimit() []expr.Any {
	return []expr.Any{&expr.Limit{Type: expr.LimitTypePkts, Rate: logRatePerMinute, Unit: expr.LimitTimeMinute, Burst: logBurst}}
}

func logExpr(prefix string) []expr.Any {
	return []expr.Any{&expr.Log{Level: expr.LogLevelInfo, Key: 1<<unix.NFTA_LOG_PREFIX | 1<<unix.NFTA_LOG_LEVEL, Data: []byte(prefix)}}
}
