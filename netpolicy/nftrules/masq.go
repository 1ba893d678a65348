//go:build linux

package nftrules

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// NATChainName is the table's source-NAT chain (see MasqueradeRuleset).
const NATChainName = "tap_nat"

// MasqueradeRuleset returns the table's source-NAT chain, which rewrites the source of
// every packet a guest sends out of the host to the address of the interface it leaves
// by (IPv4 and IPv6, the inet family's nat hook):
//
//	chain tap_nat   hook postrouting, type nat, priority srcnat (100):
//	  iifname "brd*" oifname != "brd*" masquerade
//
// Only traffic the forward chain accepted reaches it. It lives in the brood table, so
// Cleanup removes it with everything else.
func MasqueradeRuleset() *Ruleset {
	t := Table()
	accept := nftables.ChainPolicyAccept
	nat := &nftables.Chain{Table: t, Name: NATChainName, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept}
	rs := &Ruleset{Table: t, Chains: []*nftables.Chain{nat}}
	b := &builder{rs: rs}
	b.rule(nat,
		ifMatch(expr.MetaKeyIIFNAME, []byte(TapPrefix)),
		[]expr.Any{&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte(TapPrefix)}},
		[]expr.Any{&expr.Masq{}})
	return rs
}

// EnsureMasquerade implements Firewall: it adds (or re-adds, flushed) the table's
// source-NAT chain. EnsureTable must have run.
func (n *NFT) EnsureMasquerade() error {
	if err := n.Apply(MasqueradeRuleset()); err != nil {
		return fmt.Errorf("ensure nft chain inet %s %s: %w", TableName, NATChainName, err)
	}
	return nil
}

// EnsureMasquerade implements Firewall; it fails like the kernel without the table.
func (f *Fake) EnsureMasquerade() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.table {
		return fmt.Errorf("ensure nft chain inet %s %s: no table", TableName, NATChainName)
	}
	f.masq = true
	return nil
}
