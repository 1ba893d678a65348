package netpolicy

import (
	"net/netip"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// ipForm is one way a string spells an IP address where a host name is expected. A policy
// entry must name hosts: an address literal would bypass the DNS proxy's view of names
// (and resolvers, curl, browsers and inet_aton(3) all accept more spellings than the
// dotted quad, so a name-shaped address must not slip through as a "name").
type ipForm struct {
	// Name is the reason shown in the error, e.g. "IPv6 address".
	Name string
	// Examples are the spellings of this form known from the ecosystem; every one is
	// refused by ParsePattern (tested).
	Examples []string
	match    func(s string) bool
}

// ipForms lists the address spellings ParsePattern refuses, most specific first. s is the
// input with a wildcard's "*." removed, before any other check.
var ipForms = []ipForm{
	// A bracketed IPv6 literal as in a URL's authority (RFC 3986 section 3.2.2), with an
	// optional port or URL-escaped zone (RFC 6874): never a name, whatever is inside.
	{"bracketed IPv6 address", []string{"[::1]", "[::1]:443", "[fe80::1%25eth0]", "[::ffff:169.254.169.254]", "[169.254.169.254]", "[]"},
		func(s string) bool { return strings.HasPrefix(s, "[") }},
	// IPv6 text forms (RFC 4291 section 2.2, RFC 5952), an embedded IPv4 tail
	// (v4-mapped ::ffff:a.b.c.d, NAT64 64:ff9b::/96, RFC 6052) and zone ids (RFC 4007
	// section 11, "%eth0", URL-escaped "%25eth0"): hex digits, colons and dots with a colon.
	{"IPv6 address", []string{"::1", "::", "2001:db8::1", "fe80::1%eth0", "fe80::1%25eth0", "::ffff:169.254.169.254", "::ffff:a9fe:a9fe", "64:ff9b::a9fe:a9fe", "fd00:ec2::254", "::ffff:0251.0376.0251.0376"},
		isIPv6Form},
	// The dotted-decimal quad of inet_pton(3) and RFC 791, with or without a trailing
	// dot.
	{"IPv4 address", []string{"169.254.169.254", "127.0.0.1", "0.0.0.0", "100.100.100.200", "169.254.169.254."},
		func(s string) bool {
			a, err := netip.ParseAddr(strings.TrimSuffix(s, "."))
			return err == nil && a.Is4()
		}},
	// The other IPv4 spellings of inet_aton(3) and of the WHATWG URL host parser: one to
	// four parts, each decimal, octal (leading 0) or hex (0x/0X), the last part filling
	// the remaining bytes. WHATWG's "ends in a number" rule refuses every name whose last
	// label is all decimal digits or 0x/0X plus hex digits (out-of-range and five-part
	// forms included), since no top-level domain has that shape.
	{"IPv4 address in inet_aton or WHATWG URL number form", []string{
		"2852039166",          // one 32-bit decimal number (169.254.169.254)
		"0xa9fea9fe",          // one 32-bit hex number
		"0XA9FEA9FE",          // upper-case prefix and digits
		"0xa9.254.169.254",    // hex first part
		"0251.0376.0251.0376", // octal parts
		"0251.254.0xa9.254",   // mixed bases
		"169.254.43518",       // three parts: a.b.16-bit
		"169.16689662",        // two parts: a.24-bit
		"127.1",               // short loopback form
		"0x7f.1",              // short form, hex
		"017700000001",        // one octal number (127.0.0.1)
		"0",                   // 0.0.0.0
		"0x",                  // WHATWG: "0x" with no digits is 0
		"127.1.",              // trailing dot
		"2852039166.",         // trailing dot on one number
		"1.2.3.4.5",           // too many parts: not an address, still not a name
		"1.2.3.256",           // out of range: likewise
		"example.123",         // a name ending in a number is refused by WHATWG hosts
		"a.0x1f",              // likewise in hex
	}, endsInNumber},
}

// isIPv6Form reports whether s, up to an optional "%zone", has a colon and only hex
// digits, colons and dots (netip would refuse some of these, e.g. an octal IPv4 tail, but
// no host name contains a colon).
func isIPv6Form(s string) bool {
	addr, _, _ := strings.Cut(s, "%")
	if !strings.Contains(addr, ":") {
		return false
	}
	for _, c := range []byte(addr) {
		if c != ':' && c != '.' && !isHex(c) {
			return false
		}
	}
	return true
}

// endsInNumber is the WHATWG URL Standard's "ends in a number checker" (section 3.5, host
// parsing): after removing one trailing dot, the last label is all ASCII decimal digits,
// or "0x"/"0X" followed by zero or more hex digits.
func endsInNumber(s string) bool {
	s = strings.TrimSuffix(s, ".")
	last := s[strings.LastIndexByte(s, '.')+1:]
	if last == "" {
		return false
	}
	if strings.HasPrefix(last, "0x") || strings.HasPrefix(last, "0X") {
		last = last[2:]
		for _, c := range []byte(last) {
			if !isHex(c) {
				return false
			}
		}
		return true
	}
	for _, c := range []byte(last) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// ipLiteral returns the name of the first form in ipForms that s has.
func ipLiteral(s string) (string, bool) {
	for _, f := range ipForms {
		if f.match(s) {
			return f.Name, true
		}
	}
	return "", false
}

// suffixKind classifies the suffix of a wildcard "*.SUFFIX" by the Public Suffix List
// (https://publicsuffix.org, as embedded in golang.org/x/net/publicsuffix).
type suffixKind uint8

// The kinds of wildcard suffix.
const (
	// suffixRegistrable: SUFFIX is not a public suffix, so one party owns every name
	// under it.
	suffixRegistrable suffixKind = iota
	// suffixTLD: SUFFIX is one label, listed or not (the list's default rule "*" makes
	// every unlisted top-level domain public).
	suffixTLD
	// suffixICANN: SUFFIX is a public suffix of the list's ICANN section.
	suffixICANN
	// suffixPrivate: SUFFIX is a public suffix of the list's private section: a company
	// hands out names under it to anyone.
	suffixPrivate
)

// suffixRule is where a wildcard over one kind of suffix is accepted.
type suffixRule struct {
	// What describes the kind in errors.
	What string
	// Refused: ParsePattern refuses the wildcard, so no layer can name it.
	Refused bool
	// SystemOnly: only the system policy may allow the wildcard (IT's explicit choice);
	// Resolve refuses it from every other layer. Denying it is tightening and allowed
	// everywhere.
	SystemOnly bool
	// Examples are suffixes of this kind (each tested as "*." + example).
	Examples []string
}

// suffixRules says, per kind, where a wildcard "*.SUFFIX" is accepted.
var suffixRules = map[suffixKind]suffixRule{
	// One owner below the suffix: accepted in every layer ("*.corp.internal" too: the
	// default rule makes only "internal" public; the list's exception rules make
	// "city.kawasaki.jp" and "www.ck" registrable).
	suffixRegistrable: {Examples: []string{"example.com", "corp.internal", "x.github.io", "city.kawasaki.jp", "www.ck", "r.appspot.com", "githubusercontent.com.example.org"}},
	// A top-level domain, IANA-listed or not: "*.com" matches every .com name.
	suffixTLD: {What: "a top-level domain", Refused: true,
		Examples: []string{"com", "uk", "org", "internal", "test", "local", "localhost", "xn--p1ai"}},
	// Country and generic second-level registries: "*.co.uk" is every UK company. The
	// list's own wildcard rules ("*.kawasaki.jp", "*.ck") make "foo.kawasaki.jp" one too.
	suffixICANN: {What: "a public suffix (ICANN section of the Public Suffix List)", Refused: true,
		Examples: []string{"co.uk", "com.au", "ac.jp", "gov.uk", "com.br", "co.jp", "foo.kawasaki.jp", "foo.ck", "org.uk", "net.nz"}},
	// Hosting platforms where anyone can get a subdomain: "*.github.io" is every GitHub
	// Pages site, "*.githubusercontent.com" every user's uploads.
	suffixPrivate: {What: "a public suffix anyone can get a name under (private section of the Public Suffix List)", SystemOnly: true,
		Examples: []string{
			"github.io", "githubusercontent.com", "gitlab.io", "cloudfront.net", "herokuapp.com",
			"appspot.com", "googleapis.com", "blob.core.windows.net", "azurewebsites.net",
			"s3.amazonaws.com", "us-east-1.compute.amazonaws.com", "vercel.app", "netlify.app",
			"pages.dev", "workers.dev", "web.app", "firebaseapp.com", "fly.dev", "onrender.com",
			"ngrok.io", "ngrok-free.app", "readthedocs.io", "codeberg.page", "blogspot.com",
			"myshopify.com", "ts.net", "duckdns.org", "dyndns.org",
		}},
}

// classifySuffix returns the kind of name, a canonical host name, as a wildcard suffix.
func classifySuffix(name string) suffixKind {
	if !strings.Contains(name, ".") {
		return suffixTLD
	}
	ps, icann := publicsuffix.PublicSuffix(name)
	switch {
	case ps != name:
		return suffixRegistrable
	case icann:
		return suffixICANN
	default:
		return suffixPrivate // the default rule "*" only yields one label
	}
}
