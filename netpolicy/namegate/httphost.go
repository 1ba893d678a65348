package namegate

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// ParseHTTPHost parses the HTTP/1.x request head at the start of b (the first bytes a
// client sent, RFC 9112 3) with net/http's ReadRequest and returns its Host without the
// port, lower case, without a trailing dot, and the length of the head (through the
// empty line). A head that has not ended yet gives ErrIncomplete (ErrTooLarge past
// MaxHelloBytes). Refused with ErrMalformed: anything ReadRequest refuses (two Host
// headers included), a version other than 1.x, CONNECT, a request target in
// absolute-form (a server would route by its authority, not by Host) or authority-form,
// a missing or empty Host, an upgrade to HTTP/2 (h2c, RFC 7540 3.2), a Host port other
// than wantPort, and a bare LF in the head
// (so the head is exactly the bytes through the first CRLF CRLF).
func ParseHTTPHost(b []byte, wantPort string) (string, int, error) {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		if len(b) >= MaxHelloBytes {
			return "", 0, ErrTooLarge
		}
		return "", 0, ErrIncomplete
	}
	n := end + 4
	if n > MaxHelloBytes {
		return "", 0, ErrTooLarge
	}
	for i, c := range b[:n] {
		if c == '\n' && (i == 0 || b[i-1] != '\r') { // a bare LF would end lines (and the head) early
			return "", 0, fmt.Errorf("HTTP request head with a bare LF: %w", ErrMalformed)
		}
	}
	br := bufio.NewReader(bytes.NewReader(b[:n]))
	req, err := http.ReadRequest(br)
	if err != nil {
		return "", 0, fmt.Errorf("HTTP request: %w: %w", ErrMalformed, err)
	}
	if _, err := br.Peek(1); err == nil {
		return "", 0, fmt.Errorf("HTTP request head ends before its empty line: %w", ErrMalformed)
	}
	switch {
	case req.ProtoMajor != 1:
		return "", 0, fmt.Errorf("HTTP version %s: %w", req.Proto, ErrMalformed)
	case req.Method == http.MethodConnect:
		return "", 0, fmt.Errorf("HTTP CONNECT: %w", ErrMalformed)
	case req.URL.Host != "" || req.URL.Scheme != "" || !(strings.HasPrefix(req.RequestURI, "/") || req.RequestURI == "*"):
		return "", 0, fmt.Errorf("HTTP request target %q not in origin form: %w", req.RequestURI, ErrMalformed)
	case req.Host == "":
		return "", 0, fmt.Errorf("HTTP request without Host: %w", ErrMalformed)
	case upgradesToH2C(req.Header):
		return "", 0, fmt.Errorf("HTTP upgrade to h2c (later streams name their own authority): %w", ErrMalformed)
	}
	host, port := req.Host, ""
	if h, p, err := net.SplitHostPort(req.Host); err == nil {
		host, port = h, p
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if port != "" && port != wantPort {
		return "", 0, fmt.Errorf("HTTP Host port %s (connection to %s): %w", port, wantPort, ErrMalformed)
	}
	host = normalize(host)
	if host == "" || strings.ContainsAny(host, " \t/\\@") {
		return "", 0, fmt.Errorf("HTTP Host %q: %w", req.Host, ErrMalformed)
	}
	return host, n, nil
}

// upgradesToH2C reports whether h asks to switch the connection to HTTP/2 (an Upgrade
// token h2c, or an HTTP2-Settings header).
func upgradesToH2C(h http.Header) bool {
	if len(h.Values("HTTP2-Settings")) > 0 {
		return true
	}
	for _, v := range h.Values("Upgrade") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "h2c") {
				return true
			}
		}
	}
	return false
}
