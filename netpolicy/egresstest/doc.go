// Package egresstest holds brood's real-kernel egress acceptance test: network
// namespaces "host", "guest" and "internet" built by the test, the nftrules ruleset applied
// in "host", the DNS proxy pinning into it, and connects from "guest". It has no non-test
// code.
//
// Privilege: tests only; the tests need root (network namespaces, nftables) and are gated
// by testenv.
package egresstest
