// Package egress is the network side of VM sessions: the address pool each session's
// link is carved from, the tap (through the Links seam), per-interface forwarding, the
// session's nft chains and sets (through nftrules.Firewall), the session's DNS proxy
// (netpolicy/dnsproxy) with its pinner into the nft sets, and the decision log the proxy
// writes and StopVM summarizes. The policy a session enforces is decided by one function,
// resolvePolicy, which both Manager.Start and the resolve_policy call use.
//
// Files: config.go (the [egress] table), pool.go (addresses), policy.go (the policy
// decision), links.go (the Links seam and its netlink implementation), egress.go
// (Manager and Session: set-up and teardown of one session's network) and proxy.go (the
// DNS proxy's sockets, pins and decision log: the guest-facing part, which is meant to
// move into a per-session unprivileged process).
//
// Privilege: root, inside the helper daemon (Landlock-confined after startup): it creates
// taps, writes nft rules and conntrack entries, and binds the DNS port on the taps' host
// addresses. The DNS proxy it runs parses guest traffic.
package egress
