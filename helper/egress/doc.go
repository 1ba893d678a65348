// Package egress is the network side of VM sessions: the address pool each session's
// link is carved from, the tap (through the Links seam), per-interface forwarding, the
// session's nft chains and sets (through nftrules.Firewall), the session's DNS proxy
// (netpolicy/dnsproxy) and name gate (netpolicy/namegate: TCP 443 and 80 admitted only
// for the SNI or Host of a name resolved to that address), run as one unprivileged
// egress process per session, and the decision log it reports and StopVM summarizes. The policy a session enforces is decided
// by one function, resolvePolicy, which both Manager.Start and the resolve_policy call
// use, and which the pin gate applies again to every pin the egress process asks for.
//
// Files: config.go (the [egress] table), pool.go (addresses), policy.go (the policy
// decision), links.go (the Links seam and its netlink implementation), forwarding.go
// (uplink forwarding recorded and restored), networks.go (the host's own networks a
// permissive session refuses), egress.go
// (Manager and Session: set-up and teardown of one session's network), proxy.go (the
// DNS sockets and the gate's listeners, bound by root and confined to their tap by
// tapfilter.go), limits.go (the per-session connection and in-flight caps), procserve.go (the daemon's side of the
// egress process: start, stop, and the pin gate), proc.go (the egress process itself,
// ProxyMain), procwire.go (their control messages), secrets.go (a session's secret
// bindings: narrowed to its policy, handed to the egress process, whose name gate gives
// the bound hosts' TLS connections to the terminator, helper/egress/tlsterm) and
// decisionlog.go (the log's byte quota and the bounded summary).
//
// Privilege: the Manager runs as root inside the helper daemon (Landlock-confined after
// startup): it creates taps, writes nft rules and conntrack entries, binds the DNS
// sockets and the gate's listeners on the taps' host addresses and checks every pin
// request against the policy. It parses no guest traffic when ProxyExe is set (as Open
// sets it): ProxyMain, the egress process, does, as the session owner's uid and gid, not
// dumpable, no_new_privs, under Landlock with no filesystem access and TCP connect only
// to the upstream's port and to 443 and 80, Landlock's signal and abstract-socket scopes
// where the kernel has them (ABI 6), with RLIMIT_NOFILE ProcMaxFDs; with secret
// bindings their real values are in locked, non-dumped memory (internal/lockedmem).
package egress
