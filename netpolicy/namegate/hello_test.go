package namegate

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/crypto/cryptobyte"
)

// realHello returns the first flight crypto/tls sends as a client with serverName (the
// ClientHello in one record).
func realHello(t testing.TB, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: serverName, InsecureSkipVerify: serverName == ""})
		c.Handshake()
	}()
	buf := make([]byte, 64<<10)
	n, err := b.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// reframe splits the handshake bytes of the records in b into records of at most size
// bytes each.
func reframe(t testing.TB, b []byte, size int) []byte {
	if t != nil {
		t.Helper()
	}
	var hs []byte
	for len(b) >= 5 {
		n := int(b[3])<<8 | int(b[4])
		hs = append(hs, b[5:5+n]...)
		b = b[5+n:]
	}
	var out []byte
	for len(hs) > 0 {
		n := min(size, len(hs))
		out = append(out, recordHandshake, 3, 1, byte(n>>8), byte(n))
		out = append(out, hs[:n]...)
		hs = hs[n:]
	}
	return out
}

// buildHello builds a ClientHello record with the given extensions (type, data).
func buildHello(exts ...[2]any) []byte {
	var b cryptobyte.Builder
	b.AddUint8(recordHandshake)
	b.AddUint16(0x0301)
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint8(typeClientHello)
		b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) {
			b.AddUint16(0x0303)
			b.AddBytes(make([]byte, 32))
			b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) {})
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint16(0x1301) })
			b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint8(0) })
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
				for _, e := range exts {
					b.AddUint16(e[0].(uint16))
					b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(e[1].([]byte)) })
				}
			})
		})
	})
	return b.BytesOrPanic()
}

// sniData is a server_name extension's data with the given (type, name) entries.
func sniData(names ...[2]any) []byte {
	var b cryptobyte.Builder
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		for _, n := range names {
			b.AddUint8(n[0].(uint8))
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(n[1].(string))) })
		}
	})
	return b.BytesOrPanic()
}

func TestParseClientHelloReal(t *testing.T) {
	raw := realHello(t, "API.Allowed.test")
	h, n, err := ParseClientHello(raw)
	if err != nil || h.ServerName != "api.allowed.test" || h.ECH || n != len(raw) {
		t.Fatalf("ParseClientHello = %+v, %d, %v (len %d)", h, n, err, len(raw))
	}
	// Trailing bytes (the next record) are not used.
	if _, n2, err := ParseClientHello(append(raw, 23, 3, 3, 0, 1, 0)); err != nil || n2 != n {
		t.Errorf("with a trailing record: %d, %v", n2, err)
	}
	// Every proper prefix asks for more.
	for i := range len(raw) {
		if _, _, err := ParseClientHello(raw[:i]); !errors.Is(err, ErrIncomplete) {
			t.Fatalf("prefix of %d bytes: %v, want ErrIncomplete", i, err)
		}
	}
	// Fragmented over records of 1, 7 and 100 bytes of handshake: the same name.
	for _, size := range []int{1, 7, 100} {
		fr := reframe(t, raw, size)
		h, n, err := ParseClientHello(fr)
		if err != nil || h.ServerName != "api.allowed.test" || n != len(fr) {
			t.Errorf("records of %d bytes: %+v, %d, %v", size, h, n, err)
		}
	}
	// No SNI (crypto/tls sends none for an empty ServerName).
	if h, _, err := ParseClientHello(realHello(t, "")); err != nil || h.ServerName != "" {
		t.Errorf("without SNI: %+v, %v", h, err)
	}
}

func TestParseClientHelloCrafted(t *testing.T) {
	name := func(n string) [2]any { return [2]any{uint8(0), n} }
	for _, tc := range []struct {
		what string
		in   []byte
		sni  string
		ech  bool
		err  error
	}{
		{"one name", buildHello([2]any{uint16(0), sniData(name("a.test."))}), "a.test", false, nil},
		{"no extensions block", buildHello(), "", false, nil},
		{"ECH", buildHello([2]any{uint16(0), sniData(name("public.test"))}, [2]any{uint16(extECH), []byte{0}}), "public.test", true, nil},
		{"ESNI", buildHello([2]any{uint16(extESNI), []byte{1, 2}}), "", true, nil},
		{"IP literal kept as a name", buildHello([2]any{uint16(0), sniData(name("192.0.2.1"))}), "192.0.2.1", false, nil},
		{"other name type ignored", buildHello([2]any{uint16(0), sniData([2]any{uint8(7), "x"}, name("b.test"))}), "b.test", false, nil},
		{"two host names", buildHello([2]any{uint16(0), sniData(name("a.test"), name("b.test"))}), "", false, ErrMalformed},
		{"server_name twice", buildHello([2]any{uint16(0), sniData(name("a.test"))}, [2]any{uint16(0), sniData(name("b.test"))}), "", false, ErrMalformed},
		{"control byte in name", buildHello([2]any{uint16(0), sniData(name("a\x00.test"))}), "", false, ErrMalformed},
		{"empty name list", buildHello([2]any{uint16(0), []byte{0, 0}}), "", false, ErrMalformed},
		{"HTTP", []byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"), "", false, ErrNotTLS},
		{"application data record", []byte{23, 3, 3, 0, 1, 0}, "", false, ErrNotTLS},
		{"server hello", []byte{22, 3, 3, 0, 4, 2, 0, 0, 0}, "", false, ErrNotTLS},
		{"huge handshake length", []byte{22, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff}, "", false, ErrTooLarge},
		{"zero-length record", []byte{22, 3, 1, 0, 0}, "", false, ErrMalformed},
	} {
		h, _, err := ParseClientHello(tc.in)
		if (tc.err == nil) != (err == nil) || (tc.err != nil && !errors.Is(err, tc.err)) {
			t.Errorf("%s: err %v, want %v", tc.what, err, tc.err)
			continue
		}
		if err == nil && (h.ServerName != tc.sni || h.ECH != tc.ech) {
			t.Errorf("%s: %+v, want %q ech %v", tc.what, h, tc.sni, tc.ech)
		}
	}
}

func TestParseClientHelloCap(t *testing.T) {
	// A ClientHello announced at just over the cap, sent in full records: refused before
	// the gate has read more than MaxHelloBytes.
	big := buildHello([2]any{uint16(0x1234), make([]byte, MaxHelloBytes)})
	fr := reframe(t, big, 1<<14)
	if _, n, err := ParseClientHello(fr); !errors.Is(err, ErrTooLarge) || n > MaxHelloBytes {
		t.Fatalf("oversized ClientHello: %d, %v", n, err)
	}
	// A stream of tiny records that never completes a handshake header... is at most
	// MaxHelloBytes of 6-byte records before ErrTooLarge.
	var trickle []byte
	for len(trickle) < MaxHelloBytes+64 {
		trickle = append(trickle, 22, 3, 1, 0, 1, 1)
	}
	if _, _, err := ParseClientHello(trickle); err == nil || errors.Is(err, ErrIncomplete) {
		t.Fatalf("trickle of records: %v", err)
	}
}

func TestParseHTTPHost(t *testing.T) {
	for _, tc := range []struct {
		in, host string
		err      error
	}{
		{"GET / HTTP/1.1\r\nHost: Ok.Test\r\n\r\n", "ok.test", nil},
		{"GET /x?y HTTP/1.1\r\nHost: ok.test:80\r\nUser-Agent: a\r\n\r\nbody", "ok.test", nil},
		{"GET / HTTP/1.0\r\nHost: ok.test.\r\n\r\n", "ok.test", nil},
		{"OPTIONS * HTTP/1.1\r\nHost: ok.test\r\n\r\n", "ok.test", nil},
		{"GET / HTTP/1.1\r\nHost: [2001:db8::1]\r\n\r\n", "2001:db8::1", nil},
		{"GET / HTTP/1.1\r\nHost: ok.test\r\n", "", ErrIncomplete},
		{"GET / HTTP/1.1\r\nHost: ok.test:8080\r\n\r\n", "", ErrMalformed},
		{"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", "", ErrMalformed},
		{"GET http://evil.test/ HTTP/1.1\r\nHost: ok.test\r\n\r\n", "", ErrMalformed},
		{"CONNECT evil.test:443 HTTP/1.1\r\nHost: ok.test\r\n\r\n", "", ErrMalformed},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "", ErrMalformed},
		{"GET / HTTP/1.1\r\n\r\n", "", ErrMalformed},
		{"GET / HTTP/1.1\r\nHost: a@b.test\r\n\r\n", "", ErrMalformed},
		{"\x16\x03\x01\x00\x05hello\r\n\r\n", "", ErrMalformed},
		{"GET / HTTP/1.1\r\nHost: .\r\n\r\n", "", ErrMalformed},
		{"GET / HTTP/1.1\r\nHost: ok.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: H2C\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n", "", ErrMalformed},
		{"GET / HTTP/1.1\r\nHost: ok.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", "ok.test", nil},
		{"GET / HTTP/1.1\nHost: ok.test\n\nGET / HTTP/1.1\r\nHost: evil.test\r\n\r\n", "", ErrMalformed},
	} {
		host, n, err := ParseHTTPHost([]byte(tc.in), "80")
		if (tc.err == nil) != (err == nil) || (tc.err != nil && !errors.Is(err, tc.err)) || host != tc.host {
			t.Errorf("ParseHTTPHost(%q) = %q, %v; want %q, %v", tc.in, host, err, tc.host, tc.err)
		}
		if err == nil && n != strings.Index(tc.in, "\r\n\r\n")+4 {
			t.Errorf("ParseHTTPHost(%q) head length %d", tc.in, n)
		}
	}
	long := "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", MaxHelloBytes)
	if _, _, err := ParseHTTPHost([]byte(long), "80"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("endless head: %v", err)
	}
}

// FuzzParseClientHello checks that ParseClientHello never panics, never claims more bytes
// than it was given or than MaxHelloBytes, returns names in normal form, and that a parse
// that succeeded gives the same result with bytes appended (it decides on a prefix).
func FuzzParseClientHello(f *testing.F) {
	f.Add(realHello(f, "api.allowed.test"))
	f.Add(reframe(f, realHello(f, "x.test"), 13))
	f.Add(buildHello([2]any{uint16(0), sniData([2]any{uint8(0), "a.test"})}, [2]any{uint16(extECH), []byte{0}}))
	f.Add([]byte{22, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := ParseClientHello(b)
		if n < 0 || n > len(b) || n > MaxHelloBytes {
			t.Fatalf("used %d of %d bytes", n, len(b))
		}
		if err != nil {
			return
		}
		if h.ServerName != normalize(h.ServerName) || strings.ContainsAny(h.ServerName, " \x00\x7f") {
			t.Fatalf("name %q not normal", h.ServerName)
		}
		h2, n2, err2 := ParseClientHello(append(b[:len(b):len(b)], 0x17, 3, 3, 0, 1, 0))
		if err2 != nil || h2 != h || n2 != n {
			t.Fatalf("with bytes appended: %+v %d %v, was %+v %d", h2, n2, err2, h, n)
		}
	})
}

// FuzzParseHTTPHost checks that ParseHTTPHost never panics, returns a head length within
// its input that ends with the empty line, and a host in normal form without separators.
func FuzzParseHTTPHost(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n"))
	f.Add([]byte("GET http://e.test/ HTTP/1.1\r\nHost: ok.test\r\n\r\n"))
	f.Add([]byte("POST /a HTTP/1.1\r\nHost: ok.test:80\r\nContent-Length: 3\r\n\r\nabc"))
	f.Fuzz(func(t *testing.T, b []byte) {
		host, n, err := ParseHTTPHost(b, "80")
		if err != nil {
			return
		}
		if n < 4 || n > len(b) || string(b[n-4:n]) != "\r\n\r\n" {
			t.Fatalf("head length %d of %d", n, len(b))
		}
		if host == "" || host != normalize(host) || strings.ContainsAny(host, " \t\r\n/\\@") {
			t.Fatalf("host %q", host)
		}
		// The head ends where net/http ends it, and the Connection: close the gate adds
		// applies to this first request.
		closed := withClose(b, n)
		br := bufio.NewReader(bytes.NewReader(closed))
		req, err := http.ReadRequest(br)
		if err != nil || !req.Close {
			t.Fatalf("with Connection: close: %v, close %v", err, req != nil && req.Close)
		}
		if h2, n2, err := ParseHTTPHost(closed, "80"); err != nil || h2 != host || n2 != n+len("Connection: close\r\n") {
			t.Fatalf("with Connection: close: %q %d %v, was %q %d", h2, n2, err, host, n)
		}
		// What follows the head is passed on untouched.
		if rest, _ := io.ReadAll(br); string(rest) != string(b[n:]) {
			t.Fatalf("bytes after the head changed: %q, want %q", rest, b[n:])
		}
	})
}
