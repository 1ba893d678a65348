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
// a missing or empty Host, and a Host port other than wantPort.
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
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b[:n])))
	if err != nil {
		return "", 0, fmt.Errorf("HTTP request: %w: %w", ErrMalformed, err)
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
	if host == "" || strings.ContainsAny(host, " \t/\\@") {
		return "", 0, fmt.Errorf("HTTP Host %q: %w", req.Host, ErrMalformed)
	}
	return normalize(host), n, nil
}
