//go:build linux

package helper

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy/nftrules"
)

// A netfilter packet is accepted only if every base chain on its hook accepts it: brood's
// accept in its own table does not override a drop in another table (nft(8), "Base chain
// ... verdict"). So a host firewall (Docker's FORWARD policy drop, ufw's INPUT and
// FORWARD policies and its ufw-* chains, any nft or iptables-nft table) silently drops
// guest traffic that brood allowed and pinned. The helper only reads those tables and
// reports them in Doctor; it never changes them.

// foreignDrop is a base chain of another table, on the input, forward or output hook,
// that may drop brood's guest traffic: its policy is drop, or it (or a chain it jumps
// to) has a drop or reject rule.
type foreignDrop struct {
	Family, Table, Chain string
	Hook                 string // "input", "forward", "output"
	PolicyDrop           bool
	DropRules            int  // drop/reject rules in the chain and the chains it jumps to
	AcceptsBrood         bool // has an accept rule for iifname/oifname "brd*" (brood's taps)
}

// fwHooks are the hooks brood's guest traffic passes: input (the guest's DNS queries to
// the session's proxy on the tap address), forward (the guest's connections through the
// uplink, both directions), output (the proxy's answers to the guest).
var fwHooks = map[nftables.ChainHook]string{
	*nftables.ChainHookInput:   "input",
	*nftables.ChainHookForward: "forward",
	*nftables.ChainHookOutput:  "output",
}

// fwFamilies are the families whose input/forward/output hooks see the guests' IP
// traffic (bridge, netdev and arp tables do not).
var fwFamilies = map[nftables.TableFamily]string{
	nftables.TableFamilyIPv4: "ip",
	nftables.TableFamilyIPv6: "ip6",
	nftables.TableFamilyINet: "inet",
}

// maxJumpDepth bounds following jump/goto verdicts into regular chains (the kernel's own
// limit is 16 levels, nf_tables_api.c NFT_JUMP_STACK_SIZE).
const maxJumpDepth = 16

// foreignDrops reads every ip, ip6 and inet table except brood's own ("inet brood") on
// c and returns the base chains that may drop brood's guest traffic, in the kernel's
// order. Errors are those of listing chains or rules.
func foreignDrops(c *nftables.Conn) ([]foreignDrop, error) {
	chains, err := c.ListChains()
	if err != nil {
		return nil, fmt.Errorf("list nft chains: %w", err)
	}
	byName := map[string]*nftables.Chain{} // "family table chain"
	key := func(t *nftables.Table, name string) string { return fmt.Sprintf("%d %s %s", t.Family, t.Name, name) }
	for _, ch := range chains {
		byName[key(ch.Table, ch.Name)] = ch
	}
	var out []foreignDrop
	for _, ch := range chains {
		fam, ok := fwFamilies[ch.Table.Family]
		if !ok || ch.Hooknum == nil || ch.Table.Family == nftables.TableFamilyINet && ch.Table.Name == nftrules.TableName {
			continue
		}
		hook, ok := fwHooks[*ch.Hooknum]
		if !ok {
			continue
		}
		d := foreignDrop{Family: fam, Table: ch.Table.Name, Chain: ch.Name, Hook: hook,
			PolicyDrop: ch.Policy != nil && *ch.Policy == nftables.ChainPolicyDrop}
		seen := map[string]bool{}
		var walk func(ch *nftables.Chain, depth int) error
		walk = func(ch *nftables.Chain, depth int) error {
			if seen[ch.Name] || depth > maxJumpDepth {
				return nil
			}
			seen[ch.Name] = true
			rules, err := c.GetRules(ch.Table, ch)
			if err != nil {
				return fmt.Errorf("list rules of %s %s %s: %w", fam, ch.Table.Name, ch.Name, err)
			}
			for _, r := range rules {
				drop, jump := ruleVerdict(r)
				if drop {
					d.DropRules++
				}
				if depth == 0 && acceptsBrood(r) {
					d.AcceptsBrood = true
				}
				if next, ok := byName[key(ch.Table, jump)]; ok && jump != "" {
					if err := walk(next, depth+1); err != nil {
						return err
					}
				}
			}
			return nil
		}
		if err := walk(ch, 0); err != nil {
			return nil, err
		}
		if (d.PolicyDrop || d.DropRules > 0) && !d.AcceptsBrood {
			out = append(out, d)
		}
	}
	return out, nil
}

// ruleVerdict reports whether r ends in drop or reject (an nft verdict or reject
// expression, or iptables-nft's DROP/REJECT target), and the chain it jumps or goes to.
func ruleVerdict(r *nftables.Rule) (drop bool, jump string) {
	for _, e := range r.Exprs {
		switch v := e.(type) {
		case *expr.Verdict:
			switch v.Kind {
			case expr.VerdictDrop:
				drop = true
			case expr.VerdictJump, expr.VerdictGoto:
				jump = v.Chain
			}
		case *expr.Reject:
			drop = true
		case *expr.Target:
			drop = drop || v.Name == "REJECT" || v.Name == "DROP"
		}
	}
	return drop, jump
}

// acceptsBrood reports whether r accepts packets by an iifname or oifname match on
// brood's tap prefix ("brd*" in nft, "brd+" in iptables: both compare the 3-byte prefix).
func acceptsBrood(r *nftables.Rule) bool {
	iface, accept := false, false
	for i, e := range r.Exprs {
		switch v := e.(type) {
		case *expr.Meta:
			if (v.Key == expr.MetaKeyIIFNAME || v.Key == expr.MetaKeyOIFNAME) && i+1 < len(r.Exprs) {
				if cmp, ok := r.Exprs[i+1].(*expr.Cmp); ok && cmp.Op == expr.CmpOpEq && bytes.HasPrefix(cmp.Data, []byte(nftrules.TapPrefix)) {
					iface = true
				}
			}
		case *expr.Verdict:
			accept = accept || v.Kind == expr.VerdictAccept
		case *expr.Target:
			accept = accept || v.Name == "ACCEPT"
		}
	}
	return iface && accept
}

// advice is the line Doctor prints for d: what drops, and the rule that lets brood's
// guest traffic through (iptables syntax for iptables-nft's tables, whose rules nft
// should not edit; nft syntax otherwise). The README's "Docker and ufw" section says how
// to keep it across reboots.
func (d foreignDrop) advice() string {
	what := fmt.Sprintf("%d drop/reject rules", d.DropRules)
	if d.PolicyDrop {
		what = "policy drop"
		if d.DropRules > 0 {
			what += fmt.Sprintf(" and %d drop/reject rules", d.DropRules)
		}
	}
	iptables := (d.Family == "ip" || d.Family == "ip6") && d.Table == "filter"
	var fix []string
	switch {
	case iptables && d.Hook == "forward":
		cmd := "iptables"
		if d.Family == "ip6" {
			cmd = "ip6tables"
		}
		chain := d.Chain
		if chain == "FORWARD" {
			chain = "FORWARD (or DOCKER-USER where Docker runs)"
		}
		fix = []string{cmd + " -I " + chain + " -i brd+ -j ACCEPT", cmd + " -I " + chain + " -o brd+ -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"}
	case iptables && d.Hook == "input":
		fix = []string{"iptables -I " + d.Chain + " -i brd+ -p udp --dport 53 -j ACCEPT", "iptables -I " + d.Chain + " -i brd+ -p tcp --dport 53 -j ACCEPT"}
	case iptables:
		fix = []string{"iptables -I " + d.Chain + " -o brd+ -j ACCEPT"}
	case d.Hook == "forward":
		fix = []string{fmt.Sprintf(`nft insert rule %s %s %s iifname "brd*" accept`, d.Family, d.Table, d.Chain),
			fmt.Sprintf(`nft insert rule %s %s %s oifname "brd*" ct state established,related accept`, d.Family, d.Table, d.Chain)}
	case d.Hook == "input":
		fix = []string{fmt.Sprintf(`nft insert rule %s %s %s iifname "brd*" meta l4proto { tcp, udp } th dport 53 accept`, d.Family, d.Table, d.Chain)}
	default:
		fix = []string{fmt.Sprintf(`nft insert rule %s %s %s oifname "brd*" accept`, d.Family, d.Table, d.Chain)}
	}
	return fmt.Sprintf("table %s %s chain %s (%s hook): %s may drop brood's guest traffic; to let it through: %s",
		d.Family, d.Table, d.Chain, d.Hook, what, strings.Join(fix, " and "))
}

// hostFirewallCheck is the Doctor check "host firewall": the other tables' base chains
// that may drop brood's guest traffic (foreignDrops on c), each with its advice. It
// warns when there is one (brood still runs, but guests' network may fail), fails when
// the tables cannot be read.
func hostFirewallCheck(c *nftables.Conn) api.Check {
	drops, err := foreignDrops(c)
	if err != nil {
		return api.Check{Name: "host firewall", OK: false, Detail: err.Error()}
	}
	if len(drops) == 0 {
		return api.Check{Name: "host firewall", OK: true, Detail: "no other nft or iptables-nft table drops on the input, forward or output hook"}
	}
	lines := make([]string, len(drops))
	for i, d := range drops {
		lines[i] = d.advice()
	}
	slices.Sort(lines)
	return api.Check{Name: "host firewall", OK: true, Warn: true, Detail: strings.Join(lines, "\n    ") +
		"\n    (brood never changes these tables; see the README section \"Docker and ufw\")"}
}

// hostFirewallProbe returns the host firewall check Doctor runs on each call, against
// the helper's network namespace (a new netlink socket each time: the tables change
// under a running helper).
func hostFirewallProbe() func() api.Check {
	return func() api.Check {
		c, err := nftables.New()
		if err != nil {
			return api.Check{Name: "host firewall", OK: false, Detail: fmt.Sprintf("open nftables netlink: %v", err)}
		}
		return hostFirewallCheck(c)
	}
}
