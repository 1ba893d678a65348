package netpolicy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxNameLen is the longest DNS name accepted, in bytes of presentation form without the
// trailing dot (RFC 1035 section 2.3.4: 255 octets on the wire, i.e. 253 characters).
const MaxNameLen = 253

// maxLabelLen is the longest DNS label, in bytes (RFC 1035 section 2.3.4).
const maxLabelLen = 63

// Pattern is a host pattern: an exact DNS name ("github.com") or a wildcard ("*.suffix")
// that matches every name with at least one more label below suffix, but not suffix itself
// (the apex). Matching is label-anchored and case-insensitive; a trailing dot is ignored.
// The zero Pattern matches nothing.
type Pattern struct {
	// Name is the exact name, or the suffix of a wildcard: lower case, no trailing dot.
	Name string
	// Wildcard marks a "*.Name" pattern.
	Wildcard bool
}

// ParsePattern parses an exact name or "*." + name. Names are ASCII letters, digits and
// hyphens in labels of 1–63 bytes (internationalised names in their xn-- form), at most 253
// bytes, one optional trailing dot. Refused, with errors that name the input and the reason
// and wrap ErrBadPattern:
//   - IP addresses in any spelling (ipForms: dotted quads, IPv6 with or without brackets
//     and zones, and the inet_aton/WHATWG number forms "2852039166", "0xa9.254.169.254",
//     "127.1"): ErrIPLiteral;
//   - a wildcard over a top-level domain ("*.com", "*.internal") or over a public suffix of
//     the ICANN section of the Public Suffix List ("*.co.uk", "*.com.au"): ErrPublicSuffix;
//   - any other syntax ("*github.com", "a.*.com", "*", "").
//
// A wildcard over a private-section public suffix ("*.github.io") parses; Resolve accepts
// it only from the system policy (suffixRules).
func ParsePattern(s string) (Pattern, error) {
	raw := s
	wild := false
	if strings.HasPrefix(s, "*.") {
		wild = true
		s = s[2:]
	}
	if form, ok := ipLiteral(s); ok {
		return Pattern{}, fmt.Errorf("parse host pattern %q: %s: %w", raw, form, ErrIPLiteral)
	}
	name, err := CanonicalName(s)
	if err != nil {
		return Pattern{}, fmt.Errorf("parse host pattern %q: %w", raw, err)
	}
	if wild {
		if r := suffixRules[classifySuffix(name)]; r.Refused {
			return Pattern{}, fmt.Errorf("parse host pattern %q: suffix %q is %s: %w", raw, name, r.What, ErrPublicSuffix)
		}
	}
	return Pattern{Name: name, Wildcard: wild}, nil
}

// CanonicalName validates a DNS host name (see ParsePattern for the syntax) and returns it in
// lower case without a trailing dot. A name whose last label is a number (endsInNumber) is
// an IPv4 address form, not a host name (ErrIPLiteral). Errors wrap ErrBadPattern.
func CanonicalName(s string) (string, error) {
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", fmt.Errorf("empty name: %w", ErrBadPattern)
	}
	if len(s) > MaxNameLen {
		return "", fmt.Errorf("name longer than %d bytes: %w", MaxNameLen, ErrBadPattern)
	}
	b := []byte(s)
	start := 0
	for i := 0; i <= len(b); i++ {
		if i < len(b) && b[i] != '.' {
			c := b[i]
			switch {
			case c >= 'A' && c <= 'Z':
				b[i] = c + 'a' - 'A'
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
			default:
				return "", fmt.Errorf("byte %q at %d: %w", c, i, ErrBadPattern)
			}
			continue
		}
		label := b[start:i]
		if len(label) == 0 || len(label) > maxLabelLen {
			return "", fmt.Errorf("label of %d bytes at %d: %w", len(label), start, ErrBadPattern)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "", fmt.Errorf("label %q starts or ends with '-': %w", label, ErrBadPattern)
		}
		start = i + 1
	}
	if endsInNumber(s) {
		return "", fmt.Errorf("last label is a number: %w", ErrIPLiteral)
	}
	return string(b), nil
}

// String returns the pattern in the form ParsePattern accepts.
func (p Pattern) String() string {
	if p.Wildcard {
		return "*." + p.Name
	}
	return p.Name
}

// Match reports whether name (any case, optional trailing dot) is covered by p. A name that
// is not a valid host name matches nothing; the zero Pattern matches nothing.
func (p Pattern) Match(name string) bool {
	if p.Name == "" {
		return false
	}
	n, err := CanonicalName(name)
	if err != nil {
		return false
	}
	return p.matchCanonical(n)
}

// matchCanonical is Match for a name already in canonical form.
func (p Pattern) matchCanonical(n string) bool {
	if p.Name == "" {
		return false
	}
	if !p.Wildcard {
		return n == p.Name
	}
	// Label-anchored: "x.<suffix>", never the apex, never "evil<suffix>".
	return len(n) > len(p.Name)+1 && strings.HasSuffix(n, p.Name) && n[len(n)-len(p.Name)-1] == '.'
}

// Covers reports whether every name q matches is also matched by p (used to drop the entries
// a deny pattern removes).
func (p Pattern) Covers(q Pattern) bool {
	if q.Wildcard {
		return p.Wildcard && (q.Name == p.Name || p.matchCanonical(q.Name))
	}
	return p.matchCanonical(q.Name)
}

// Proto is a transport protocol of a port entry.
type Proto string

// The protocols a host entry may allow.
const (
	TCP Proto = "tcp"
	UDP Proto = "udp"
)

// Port is one allowed destination port.
type Port struct {
	Proto Proto
	Num   uint16
}

// DefaultPorts is what an entry allows when it names no ports: TCP 443 (HTTPS).
var DefaultPorts = []Port{{TCP, 443}}

// ParsePort parses "443" (TCP), "443/tcp" or "53/udp". Errors wrap ErrBadPort.
func ParsePort(s string) (Port, error) {
	num, proto, found := strings.Cut(s, "/")
	p := Port{Proto: TCP}
	if found {
		switch Proto(strings.ToLower(proto)) {
		case TCP:
		case UDP:
			p.Proto = UDP
		default:
			return Port{}, fmt.Errorf("parse port %q: protocol: %w", s, ErrBadPort)
		}
	}
	n, err := strconv.ParseUint(num, 10, 16)
	if err != nil || n == 0 || strings.HasPrefix(num, "+") || strings.HasPrefix(num, "0") {
		return Port{}, fmt.Errorf("parse port %q: %w", s, ErrBadPort)
	}
	p.Num = uint16(n)
	return p, nil
}

// String returns "NUM/proto".
func (p Port) String() string { return strconv.Itoa(int(p.Num)) + "/" + string(p.Proto) }

// MarshalText renders "NUM/proto" (JSON logs).
func (p Port) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// Entry is one allowed host pattern with the ports it may be reached on.
type Entry struct {
	Pattern Pattern
	// Ports is sorted and duplicate-free; empty means DefaultPorts.
	Ports []Port
}

// ParseEntry parses a pattern and its port strings (none: DefaultPorts).
func ParseEntry(pattern string, ports ...string) (Entry, error) {
	p, err := ParsePattern(pattern)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Pattern: p}
	for _, s := range ports {
		port, err := ParsePort(s)
		if err != nil {
			return Entry{}, fmt.Errorf("host %q: %w", pattern, err)
		}
		e.Ports = append(e.Ports, port)
	}
	e.Ports = normPorts(e.Ports)
	return e, nil
}

// EffectivePorts returns e.Ports, or DefaultPorts when e names none.
func (e Entry) EffectivePorts() []Port {
	if len(e.Ports) == 0 {
		return DefaultPorts
	}
	return e.Ports
}

// String renders "pattern" or "pattern (443/tcp, 22/tcp)".
func (e Entry) String() string {
	if len(e.Ports) == 0 {
		return e.Pattern.String()
	}
	ps := make([]string, len(e.Ports))
	for i, p := range e.Ports {
		ps[i] = p.String()
	}
	return e.Pattern.String() + " (" + strings.Join(ps, ", ") + ")"
}

func normPorts(ps []Port) []Port {
	slices.SortFunc(ps, func(a, b Port) int {
		if c := strings.Compare(string(a.Proto), string(b.Proto)); c != 0 {
			return c
		}
		return int(a.Num) - int(b.Num)
	})
	return slices.Compact(ps)
}
