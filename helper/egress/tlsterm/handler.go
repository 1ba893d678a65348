package tlsterm

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// handler checks, rewrites and forwards the requests of one guest connection.
type handler struct {
	t    *Terminator
	sni  string
	port uint16
	up   *http.Transport
	// batch gathers the guest connection's writes during an HTTP/1.1 body write.
	batch *batchConn
}

// request is the state of one request between the checks and the response.
type request struct {
	h     *handler
	list  []binding
	login string      // the login whose refresh token the body carried (token endpoint)
	scan  *scanReader // the streaming body scanner, if any
	token bool        // a POST to a token endpoint of a binding of this host
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if reason := h.checkHost(r); reason != "" {
		h.block(w, r, "", reason)
		return
	}
	if r.Header.Get("Upgrade") != "" || r.Method == http.MethodConnect {
		h.block(w, r, "", "protocol upgrade or CONNECT (its bytes could not be inspected)")
		return
	}
	if len(r.Trailer) > 0 {
		h.block(w, r, "", "request trailers (they would pass uninspected)")
		return
	}
	list, maxLen := h.t.cfg.Bindings.snapshot()
	q := &request{h: h, list: list}
	if b, reason := q.swapHeaders(r.Header); b != nil || reason != "" {
		h.block(w, r, nameOf(b), orDefault(reason, "placeholder not bound to this host in a header"))
		return
	}
	if b := q.swapURL(r.URL); b != nil {
		h.block(w, r, b.name, "placeholder not bound to this host in the URL")
		return
	}
	if name, reason := q.body(r, maxLen); reason != "" {
		h.block(w, r, name, reason)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite:        q.rewrite,
		Transport:      h.up,
		ErrorLog:       discardLog,
		ErrorHandler:   q.proxyError,
		ModifyResponse: q.modifyResponse,
		BufferPool:     copyBuffers,
	}
	if r.ProtoMajor == 2 {
		w = recordWriter{w}
	} else {
		w = batchWriter{w, h.batch}
	}
	rp.ServeHTTP(w, r)
}

// checkHost returns why r's Host, :authority or absolute URL differs from the SNI, or "".
func (h *handler) checkHost(r *http.Request) string {
	if r.Host == "" {
		return "no Host or :authority"
	}
	names := append([]string{r.Host}, r.Header.Values("Host")...)
	if r.URL.Host != "" {
		names = append(names, r.URL.Host)
	}
	for _, n := range names {
		host, port, err := net.SplitHostPort(n)
		if err != nil {
			host, port = n, ""
		}
		if normalizeHost(host) != h.sni {
			return "Host or :authority differs from the TLS server name"
		}
		if port != "" && port != "443" && port != strconv.Itoa(int(h.port)) {
			return "Host or :authority names another port"
		}
	}
	return ""
}

// block refuses r with 403, counts it and reports it.
func (h *handler) block(w http.ResponseWriter, r *http.Request, binding, reason string) {
	h.t.emit(Event{Kind: EventBlock, Host: h.sni, Binding: binding, Reason: reason})
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	http.Error(w, "brood: request refused: "+reason, http.StatusForbidden)
}

func (q *request) swapped(list []*binding) {
	for _, b := range list {
		q.h.t.emit(Event{Kind: EventSwap, Host: q.h.sni, Binding: b.name})
	}
}

// swapHeaders swaps the placeholders bound to this host in every header value (and in
// HTTP Basic credentials, decoded), and returns the first binding found that is bound
// elsewhere, or a reason when Basic credentials do not decode.
func (q *request) swapHeaders(hdr http.Header) (*binding, string) {
	for name, vals := range hdr {
		if b := findFold(name, q.list); b != nil {
			return b, "placeholder in a header name"
		}
		for i, v := range vals {
			if scheme, cred, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Basic") &&
				(strings.EqualFold(name, "Authorization") || strings.EqualFold(name, "Proxy-Authorization")) {
				raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
				if err != nil {
					return nil, "Basic credentials that do not decode"
				}
				out, sw, foreign := swapText(string(raw), q.list, q.h.sni, false, nil)
				if foreign != nil {
					return foreign, ""
				}
				q.swapped(sw)
				v = scheme + " " + base64.StdEncoding.EncodeToString([]byte(out))
			}
			out, sw, foreign := swapText(v, q.list, q.h.sni, false, nil)
			if foreign != nil {
				return foreign, ""
			}
			q.swapped(sw)
			vals[i] = out
		}
	}
	return nil, ""
}

// swapURL swaps the placeholders bound to this host in u's path and query and returns the
// first binding found that is bound elsewhere.
func (q *request) swapURL(u *url.URL) *binding {
	path, sw, foreign := swapText(u.Path, q.list, q.h.sni, false, nil)
	if foreign != nil {
		return foreign
	}
	if len(sw) > 0 {
		q.swapped(sw)
		u.Path, u.RawPath = path, ""
	}
	query, sw, foreign := swapText(u.RawQuery, q.list, q.h.sni, false, url.QueryEscape)
	if foreign != nil {
		return foreign
	}
	q.swapped(sw)
	u.RawQuery = query
	return nil
}

// body prepares r's body: buffered and swapped for a token endpoint, buffered and
// inspected when compressed, otherwise wrapped in a streaming scanner. It returns the
// binding name and reason of a refusal, or "" to go on.
func (q *request) body(r *http.Request, maxLen int) (string, string) {
	if r.Body == nil || r.Body == http.NoBody {
		return "", ""
	}
	enc := r.Header.Get("Content-Encoding")
	q.token = r.Method == http.MethodPost && q.isTokenURL("https://"+q.h.sni+r.URL.Path)
	if q.token || (enc != "" && !strings.EqualFold(enc, "identity")) {
		return q.bufferedBody(r, enc)
	}
	var foreign []binding
	for _, b := range q.list {
		if !b.swappable(q.h.sni, false) {
			foreign = append(foreign, b)
		}
	}
	if len(foreign) > 0 {
		q.scan = newScanReader(r.Body, foreign, maxLen, r.ContentLength)
		r.Body = q.scan
	}
	return "", ""
}

// isTokenURL reports whether u is a token endpoint of a refresh binding of this host.
func (q *request) isTokenURL(u string) bool {
	for _, b := range q.list {
		if b.role == "refresh" && b.boundTo(q.h.sni) {
			for _, t := range b.tokenURLs {
				if t == u {
					return true
				}
			}
		}
	}
	return false
}

// bufferedBody reads r's body (at most MaxBody bytes), inspects it and, for a token
// endpoint in identity coding, swaps its placeholders, escaped for its media type.
func (q *request) bufferedBody(r *http.Request, enc string) (string, string) {
	cfg := q.h.t.cfg
	data, err := io.ReadAll(io.LimitReader(r.Body, cfg.MaxBody+1))
	r.Body.Close()
	if err != nil {
		return "", "request body could not be read"
	}
	if int64(len(data)) > cfg.MaxBody {
		return "", "body over the inspection limit"
	}
	plain, err := decodeBody(enc, data, cfg.MaxDecoded)
	if err != nil {
		return "", "compressed body that could not be inspected"
	}
	if enc != "" && !strings.EqualFold(enc, "identity") {
		if b := findAny(plain, q.list); b != nil {
			return b.name, "placeholder in a compressed body"
		}
	} else {
		out, sw, foreign := swapText(string(data), q.list, q.h.sni, q.token, bodyEscaper(r.Header.Get("Content-Type")))
		if foreign != nil {
			return foreign.name, "placeholder not bound to this host in the body"
		}
		q.swapped(sw)
		q.login = loginOf(sw)
		data = []byte(out)
	}
	r.Body = io.NopCloser(bytes.NewReader(data))
	r.ContentLength = int64(len(data))
	r.Header.Set("Content-Length", strconv.Itoa(len(data)))
	return "", ""
}

// loginOf returns the login of the first refresh binding of list.
func loginOf(list []*binding) string {
	for _, b := range list {
		if b.role == "refresh" {
			return b.login
		}
	}
	return ""
}

// bodyEscaper returns how a real value is written into a body of media type ct: form
// values percent-encoded, JSON strings escaped, anything else as it is.
func bodyEscaper(ct string) func(string) string {
	mt, _, _ := mime.ParseMediaType(ct)
	switch {
	case mt == "application/x-www-form-urlencoded":
		return url.QueryEscape
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return func(s string) string {
			b, _ := json.Marshal(s)
			return string(b[1 : len(b)-1])
		}
	}
	return nil
}

// rewrite points the outgoing request at the real host.
func (q *request) rewrite(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "https", q.h.sni, q.h.sni
	if q.token {
		// The transport then asks for gzip itself and decodes it, so the token
		// response can be read and rewritten.
		pr.Out.Header.Del("Accept-Encoding")
	}
}

// proxyError answers a failed round trip: 403 when the body scanner refused the body,
// else 502.
func (q *request) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if q.scan != nil && q.scan.blocked() {
		q.h.block(w, r, q.scan.found.name, "placeholder not bound to this host in the body")
		return
	}
	if errors.Is(err, errRefresh) {
		q.h.t.emit(Event{Kind: EventBlock, Host: q.h.sni, Reason: err.Error()})
	}
	http.Error(w, "brood: upstream request failed", http.StatusBadGateway)
}

func nameOf(b *binding) string {
	if b == nil {
		return ""
	}
	return b.name
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// findFold returns the first binding of list whose placeholder occurs in s, ignoring case
// (header names arrive canonicalized).
func findFold(s string, list []binding) *binding {
	s = strings.ToLower(s)
	for i := range list {
		if strings.Contains(s, strings.ToLower(list[i].placeholder)) {
			return &list[i]
		}
	}
	return nil
}

// maxDataPerRecord is the most response bytes handed at once to the HTTP/2 server: a DATA
// frame of that many bytes and its 9-byte header (RFC 9113 section 4.1) fill one TLS
// record (2^14 bytes of plaintext, RFC 8446 section 5.1), where a frame of 2^14 bytes
// would cost a second record, AEAD seal and write for its last 9 bytes.
const maxDataPerRecord = 1<<14 - 9

// recordWriter hands the response body of an HTTP/2 stream to its ResponseWriter in
// pieces of at most maxDataPerRecord bytes.
type recordWriter struct{ http.ResponseWriter }

func (w recordWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		m, err := w.ResponseWriter.Write(p[:min(len(p), maxDataPerRecord)])
		n += m
		if err != nil {
			return n, err
		}
		p = p[m:]
	}
	return n, nil
}

// Unwrap lets http.ResponseController reach the ResponseWriter (to flush).
func (w recordWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// copyBuffers are the buffers a response body is copied through: 4 maxDataPerRecord
// pieces, so that a full buffer splits into whole records.
var copyBuffers = &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 4*maxDataPerRecord); return &b }}}

// bufferPool is an httputil.BufferPool over a sync.Pool of *[]byte.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte  { return *b.p.Get().(*[]byte) }
func (b *bufferPool) Put(p []byte) { b.p.Put(&p) }
