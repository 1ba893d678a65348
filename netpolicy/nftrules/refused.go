//go:build linux

package nftrules

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
)

// splitFamilies returns the masked prefixes of ps by family, each disjoint (disjoint).
func splitFamilies(ps []netip.Prefix) (p4, p6 []netip.Prefix) {
	for _, p := range ps {
		if p.Addr().Is4() {
			p4 = append(p4, p.Masked())
		} else {
			p6 = append(p6, p.Masked())
		}
	}
	return disjoint(p4), disjoint(p6)
}

// SetRefused implements Firewall: in one transaction it flushes the session's refused sets
// (s<id>_r4, s<id>_r6) and fills them with refused, so that no packet meets a set that is
// half updated (nft transactions commit atomically).
func (n *NFT) SetRefused(id string, refused []netip.Prefix) error {
	if err := ValidateSessionID(id); err != nil {
		return err
	}
	p4, p6 := splitFamilies(refused)
	n4, n6 := RefusedSetNames(id)
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range []struct {
		name string
		key  nftables.SetDatatype
		ps   []netip.Prefix
	}{{n4, nftables.TypeIPAddr, p4}, {n6, nftables.TypeIP6Addr, p6}} {
		s := &nftables.Set{Table: Table(), Name: x.name, KeyType: x.key, Interval: true}
		n.conn.FlushSet(s)
		if els := intervalElements(x.ps); len(els) > 0 {
			if err := n.conn.SetAddElements(s, els); err != nil {
				return fmt.Errorf("set refused networks of session %s: set %s: %w", id, x.name, err)
			}
		}
	}
	if err := n.conn.Flush(); err != nil {
		return fmt.Errorf("set refused networks of session %s in nft table inet %s: %w", id, TableName, err)
	}
	return nil
}

// SetRefused implements Firewall; it fails like the kernel when the session is missing or
// has no refused sets (not AnyPort and no Refused at AddSession).
func (f *Fake) SetRefused(id string, refused []netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sessions[id]
	if !ok || (!s.AnyPort && len(s.Refused) == 0) {
		return fmt.Errorf("set refused networks of session %s: no such set", id)
	}
	s.Refused = slices.Clone(refused)
	f.sessions[id] = s
	return nil
}

// Refused returns session id's refused networks as AddSession and SetRefused left them.
func (f *Fake) Refused(id string) []netip.Prefix {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sessions[id].Refused)
}
