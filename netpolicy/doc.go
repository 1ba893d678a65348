// Package netpolicy is brood's egress policy model: profiles, host patterns, the ranges that
// are always refused, the system policy file, tighten-only merging of the configuration
// layers, and discovery of the package registries the host itself is configured to use.
//
// It is pure (no netlink, no nftables) so that the unprivileged frontend can link it to print
// `brood policy show`; enforcement lives in the subpackages nftrules (the session's nftables
// ruleset as values) and dnsproxy (the per-session policy DNS proxy), used by the helper.
//
// Zero values are safe: the zero Profile is Locked, an empty host list allows nothing, and a
// zero Effective policy refuses every name.
//
// Privilege: none; pure values and file parsing, linked into broodd-helper (which
// enforces the merged policy) and into brood (policy show, and the layers brood sends the
// helper).
package netpolicy
