package netpolicy

import "strings"

// specialUseName is a domain that the public DNS never answers for, so an allow entry
// naming it (or a name under it) can only reach the host itself, the LAN, or nothing.
type specialUseName struct {
	// Domain is the special-use domain, canonical (lower case, no trailing dot).
	Domain string
	// What says what the domain is, with its source, for errors.
	What string
}

// specialUseNames are the special-use domain names (IANA's registry, RFC 6761 section 3)
// that an allow entry may not name, whichever layer it comes from. A deny entry may
// name them (denying is always allowed). "test" and "example" (RFC 6761 sections 6.2 and
// 6.5) are not listed: they are free for test set-ups, and brood's own tests use them.
var specialUseNames = []specialUseName{
	{"localhost", "the loopback name (RFC 6761 section 6.3)"},
	{"invalid", "a name that never exists (RFC 6761 section 6.4)"},
	{"local", "a multicast DNS name on the local link (RFC 6762 section 3)"},
	{"home.arpa", "a home network's name (RFC 8375)"},
	{"onion", "a Tor onion service name (RFC 7686)"},
	{"arpa", "the infrastructure domain of reverse lookups (RFC 3172)"},
}

// specialUse returns the special-use domain that name, a canonical host name, is or is
// under, if any.
func specialUse(name string) (specialUseName, bool) {
	for _, d := range specialUseNames {
		if name == d.Domain || strings.HasSuffix(name, "."+d.Domain) {
			return d, true
		}
	}
	return specialUseName{}, false
}
