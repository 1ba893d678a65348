package namegate

import (
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/crypto/cryptobyte"
)

// TLS constants (RFC 8446 5.1, 4, 4.2; RFC 6066 3; draft-ietf-tls-esni).
const (
	recordHandshake  = 22     // ContentType handshake
	typeClientHello  = 1      // HandshakeType client_hello
	extServerName    = 0      // server_name
	extECH           = 0xfe0d // encrypted_client_hello (draft-ietf-tls-esni-18 and later)
	extESNI          = 0xffce // encrypted_server_name (draft-ietf-tls-esni-02 and earlier)
	nameTypeHostName = 0      // NameType host_name
	maxRecordLen     = 1<<14 + 256
)

// MaxHelloBytes bounds the bytes the gate reads for one ClientHello or HTTP request head:
// browsers' ClientHellos with post-quantum key shares are about 2 KiB, well inside one
// 16 KiB TLS record; twice that covers one split over two records.
const MaxHelloBytes = 32 << 10

// Hello is what the gate takes from a ClientHello.
type Hello struct {
	// ServerName is the host_name of the server_name extension, lower case, without a
	// trailing dot; empty when there is none.
	ServerName string
	// ECH is set when the ClientHello carries encrypted_client_hello or the older
	// encrypted_server_name: the name the server will serve is then not ServerName.
	ECH bool
}

// ParseClientHello parses the TLS records at the start of b (the first bytes a client
// sent) up to the end of its ClientHello, which may span several records. It returns
// the Hello and the number of bytes of b it used. A prefix of a valid ClientHello gives
// ErrIncomplete; more than MaxHelloBytes without a complete one gives ErrTooLarge;
// anything else that is not a well-formed ClientHello (RFC 8446 4.1.2; TLS 1.0–1.2 forms
// included) gives ErrNotTLS or ErrMalformed.
func ParseClientHello(b []byte) (Hello, int, error) {
	var hs []byte // the handshake bytes of the records read so far
	used := 0
	for {
		msg, complete := handshakeMessage(hs)
		if complete {
			h, err := parseHelloBody(msg)
			return h, used, err
		}
		if used >= MaxHelloBytes || len(hs) >= MaxHelloBytes {
			return Hello{}, used, ErrTooLarge
		}
		if msg == nil && len(hs) >= 4 {
			return Hello{}, used, fmt.Errorf("handshake message type %d: %w", hs[0], ErrNotTLS)
		}
		if len(hs) >= 4 && 4+(int(hs[1])<<16|int(hs[2])<<8|int(hs[3])) > MaxHelloBytes {
			return Hello{}, used, ErrTooLarge
		}
		rest := b[used:]
		if len(rest) < 5 {
			return Hello{}, used, ErrIncomplete
		}
		if rest[0] != recordHandshake || rest[1] != 3 {
			return Hello{}, used, ErrNotTLS
		}
		n := int(rest[3])<<8 | int(rest[4])
		if n == 0 || n > maxRecordLen {
			return Hello{}, used, fmt.Errorf("record of %d bytes: %w", n, ErrMalformed)
		}
		if len(rest) < 5+n {
			if used+5+n > MaxHelloBytes {
				return Hello{}, used, ErrTooLarge
			}
			return Hello{}, used, ErrIncomplete
		}
		hs = append(hs, rest[5:5+n]...)
		used += 5 + n
	}
}

// handshakeMessage returns the body of the ClientHello at the start of hs and true when
// it is complete; (non-nil, false) while it may still be one; (nil, false) when hs starts
// with another handshake type.
func handshakeMessage(hs []byte) ([]byte, bool) {
	if len(hs) < 4 {
		return []byte{}, false
	}
	if hs[0] != typeClientHello {
		return nil, false
	}
	n := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
	if len(hs) < 4+n {
		return []byte{}, false
	}
	return hs[4 : 4+n], true
}

// parseHelloBody parses a ClientHello body (RFC 8446 4.1.2) with cryptobyte.
func parseHelloBody(body []byte) (Hello, error) {
	s := cryptobyte.String(body)
	var version uint16
	var random, sessionID, suites, compression cryptobyte.String
	if !s.ReadUint16(&version) || !s.ReadBytes((*[]byte)(&random), 32) ||
		!s.ReadUint8LengthPrefixed(&sessionID) || len(sessionID) > 32 ||
		!s.ReadUint16LengthPrefixed(&suites) || len(suites) == 0 || len(suites)%2 != 0 ||
		!s.ReadUint8LengthPrefixed(&compression) || len(compression) == 0 {
		return Hello{}, fmt.Errorf("ClientHello: %w", ErrMalformed)
	}
	if version>>8 != 3 {
		return Hello{}, fmt.Errorf("ClientHello version %#04x: %w", version, ErrNotTLS)
	}
	var h Hello
	if s.Empty() {
		return h, nil // no extensions (TLS 1.0–1.2 allow it): no name
	}
	var exts cryptobyte.String
	if !s.ReadUint16LengthPrefixed(&exts) || !s.Empty() {
		return Hello{}, fmt.Errorf("ClientHello extensions: %w", ErrMalformed)
	}
	seen := map[uint16]bool{}
	for !exts.Empty() {
		var typ uint16
		var data cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return Hello{}, fmt.Errorf("ClientHello extension: %w", ErrMalformed)
		}
		if seen[typ] { // RFC 8446 4.2: at most one of each type
			return Hello{}, fmt.Errorf("ClientHello extension %d twice: %w", typ, ErrMalformed)
		}
		seen[typ] = true
		switch typ {
		case extServerName:
			name, err := parseServerName(data)
			if err != nil {
				return Hello{}, err
			}
			h.ServerName = name
		case extECH, extESNI:
			h.ECH = true
		}
	}
	return h, nil
}

// parseServerName parses a server_name extension's ServerNameList (RFC 6066 3): exactly
// one host_name, ASCII, lower-cased, without a trailing dot.
func parseServerName(data cryptobyte.String) (string, error) {
	var list cryptobyte.String
	if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() || list.Empty() {
		return "", fmt.Errorf("server_name: %w", ErrMalformed)
	}
	var name string
	for !list.Empty() {
		var typ uint8
		var host cryptobyte.String
		if !list.ReadUint8(&typ) || !list.ReadUint16LengthPrefixed(&host) || len(host) == 0 {
			return "", fmt.Errorf("server_name entry: %w", ErrMalformed)
		}
		if typ != nameTypeHostName {
			continue
		}
		if name != "" { // RFC 6066 3: one name per type
			return "", fmt.Errorf("server_name with two host names: %w", ErrMalformed)
		}
		for _, c := range host {
			if c <= ' ' || c >= 0x7f {
				return "", fmt.Errorf("server_name byte %#x: %w", c, ErrMalformed)
			}
		}
		name = normalize(string(host))
	}
	return name, nil
}

// normalize lower-cases name and drops one trailing dot.
func normalize(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// isIPLiteral reports whether name is an IPv4 or IPv6 address (RFC 6066 3 forbids them in
// SNI; a Host header may carry one in brackets).
func isIPLiteral(name string) bool {
	_, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]"))
	return err == nil
}
