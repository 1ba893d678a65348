// Package nftrules builds brood's nftables ruleset as values and applies it with
// github.com/google/nftables (never nft text built from input). It owns the names of
// brood's host network objects: the table (TableName), the tap name prefix (TapPrefix,
// TapName) and every chain and set; the ruleset and Firewall exist on Linux only, the
// names and their validation everywhere.
//
// One table, `inet brood`:
//
//	set refused_v4, refused_v6   always-refused destinations (interval; netpolicy.RefusedPrefixes)
//	map fwd_taps, in_taps,       tap name : jump to the session's chain (ifname : verdict)
//	    nat_taps
//	chain tap_forward            hook forward, priority filter, policy accept:
//	  oifname "brd*" ct state established,related accept
//	  oifname "brd*" counter drop               nothing new into a guest
//	  iifname vmap @fwd_taps
//	  iifname "brd*" counter drop               a tap without a session
//	chain tap_input              hook input, priority filter, policy accept:
//	  iifname vmap @in_taps
//	  iifname "brd*" counter drop
//	chain tap_prerouting         hook prerouting, type nat, priority dstnat, policy accept:
//	  iifname vmap @nat_taps
//
// and per session <id> with tap T = "brd<id>" (map keys are the NUL-padded 16-byte name, so
// "brd1" never matches "brd12"):
//
//	set s<id>_v4, s<id>_v6       address . protocol . port, pinned by the session's DNS proxy
//	                             (ipv4_addr/ipv6_addr . inet_proto . inet_service, flags timeout)
//	fwd_taps T : jump s<id>_fwd;  in_taps T : jump s<id>_in;  nat_taps T : jump s<id>_nat (gated)
//	chain s<id>_nat (gated sessions: not permissive):
//	  meta l4proto tcp th dport {80,443} ip daddr . meta l4proto . th dport @s<id>_v4
//	      dnat ip to PROXY4:GATE4;  ip6 likewise to [PROXY6]:GATE6   (the name gate)
//	chain s<id>_fwd:
//	  ip saddr != GUEST4 counter drop;  ip6 saddr != { GUEST6, GUESTLL } counter drop
//	  ct state established,related accept
//	  meta l4proto {tcp,udp} th dport {53,853,5353,5355} counter drop
//	  udp dport 443 counter reject with icmpx type port-unreachable   (not permissive: QUIC)
//	  ip daddr @refused_v4 counter reject;  ip6 daddr @refused_v6 likewise
//	  ip daddr . meta l4proto . th dport @s<id>_v4 accept;  ip6 likewise   (Permissive: accept)
//	  limit rate 10/minute burst 5 packets log prefix "brood s<id> reject: "
//	  counter reject with icmpx type admin-prohibited
//	chain s<id>_in:
//	  the two source checks; ct state established,related accept
//	  ip daddr PROXY4 udp dport 53 accept;  tcp; ip6 PROXY6 likewise
//	  ip daddr PROXY4 tcp dport GATE4 ct status dnat accept;  ip6 likewise   (gated)
//	  icmpv6 type {nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert} accept
//	  limit ... log ...;  counter reject ...
//
// Adding or deleting a session is one transaction (its map elements, chains and sets); a
// tap whose session is gone, or that was never given one, falls to the "brd*" drop rules.
//
// A gated session's TCP connection to a pinned address on 80 or 443 is thus delivered to
// its name gate (package namegate, in the session's egress process), which admits it only
// for a name resolved to that address; one to an address not pinned on that port falls to
// the forward chain's reject, as before.
//
// A pin is one element per address and port of the host entry that allowed the name, so an
// address is reachable only on the ports of the entry it was resolved for.
//
// Privilege: building the ruleset needs none; applying it needs CAP_NET_ADMIN, which only
// the root helper has.
package nftrules

// TableName is brood's one nftables table, family inet ("inet brood"). brood owns it
// entirely: Firewall.Cleanup deletes it with everything in it.
const TableName = "brood"
