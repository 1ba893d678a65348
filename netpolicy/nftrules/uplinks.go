//go:build linux

package nftrules

import (
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Names of the sets of uplinks on which brood switched forwarding on (they were off
// before): IPv4 (net.ipv4.conf.<if>.forwarding) and IPv6 (force_forwarding, with the
// global IPv6 switch off).
const (
	HeldV4Name = "held_v4"
	HeldV6Name = "held_v6"
)

// heldSet returns one of the held-uplink sets (interface names, 16 bytes).
func heldSet(name string) *nftables.Set {
	return &nftables.Set{Table: Table(), Name: name, KeyType: nftables.TypeIFName, KeyByteOrder: nativeEndian()}
}

// heldRules adds to tap_forward, after the tap rules, the drop of everything forwarded
// from a held uplink to an interface that is not a tap:
//
//	meta nfproto ipv4 iifname @held_v4 oifname != "brd*" counter drop
//	meta nfproto ipv6 iifname @held_v6 oifname != "brd*" counter drop
//
// With forwarding off the kernel forwarded none of it; brood turned forwarding on for its
// guests' replies only.
func heldRules(b *builder, fwd *nftables.Chain, v4, v6 *nftables.Set) {
	notTap := []expr.Any{&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte(TapPrefix)}}
	for _, x := range []struct {
		proto byte
		set   *nftables.Set
	}{{unix.NFPROTO_IPV4, v4}, {unix.NFPROTO_IPV6, v6}} {
		b.rule(fwd, nfproto(x.proto),
			[]expr.Any{&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}},
			lookup(x.set.Name, x.set.ID), notTap, counter(), verdict(expr.VerdictDrop))
	}
}

// HoldUplinks implements Firewall: it replaces the elements of held_v4 and held_v6 with
// v4 and v6 in one transaction.
func (n *NFT) HoldUplinks(v4, v6 []string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range []struct {
		name  string
		links []string
	}{{HeldV4Name, v4}, {HeldV6Name, v6}} {
		s := heldSet(x.name)
		n.conn.FlushSet(s)
		var els []nftables.SetElement
		for _, l := range x.links {
			k, err := IfNameBytes(l)
			if err != nil {
				return fmt.Errorf("hold uplinks: %w", err)
			}
			els = append(els, nftables.SetElement{Key: k})
		}
		if len(els) > 0 {
			if err := n.conn.SetAddElements(s, els); err != nil {
				return fmt.Errorf("hold uplinks: set %s: %w", x.name, err)
			}
		}
	}
	if err := n.conn.Flush(); err != nil {
		return fmt.Errorf("hold uplinks %v, %v in nft table inet %s: %w", v4, v6, TableName, err)
	}
	return nil
}

// HoldUplinks implements Firewall; it fails like the kernel without the table.
func (f *Fake) HoldUplinks(v4, v6 []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.table {
		return fmt.Errorf("hold uplinks: no table")
	}
	f.held = [2][]string{slices.Clone(v4), slices.Clone(v6)}
	return nil
}

// Held returns the uplinks of the last HoldUplinks call (IPv4, IPv6).
func (f *Fake) Held() (v4, v6 []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.held[0]), slices.Clone(f.held[1])
}
