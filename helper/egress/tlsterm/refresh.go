package tlsterm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// errRefresh marks a token-endpoint response that could not be rewritten.
var errRefresh = errors.New("token response could not be rewritten")

// tokenFields are the OAuth 2.0 token response members that carry tokens (RFC 6749
// section 5.1; id_token from OpenID Connect Core section 3.1.3.3), with their roles.
var tokenFields = []struct{ key, role string }{
	{"access_token", "access"},
	{"refresh_token", "refresh"},
	{"id_token", "id"},
}

// modifyResponse rewrites a token-endpoint response (rewriteToken); other responses
// stream through a scrubReader. A response that arrives after the body scanner refused the body
// is dropped (the guest gets 403); one that arrives before (the real host answered
// without reading the whole body) passes, and the rest of the body is not sent.
func (q *request) modifyResponse(resp *http.Response) error {
	if q.scan != nil && q.scan.blocked() {
		resp.Body.Close()
		return errBlocked
	}
	if !q.token {
		q.scrub(resp)
		return nil
	}
	return q.rewriteToken(resp)
}

// scrub wraps an identity-coded response body in a scrubReader. When a placeholder's
// length differs from its value's, the length of the body may change: it is then sent
// without Content-Length.
func (q *request) scrub(resp *http.Response) {
	if resp.Body == nil || resp.Body == http.NoBody {
		return
	}
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return
	}
	list, _ := q.h.t.cfg.Bindings.snapshot()
	for _, b := range list {
		if len(b.placeholder) != len(b.value) {
			resp.ContentLength = -1
			resp.Header.Del("Content-Length")
			break
		}
	}
	resp.Body = newScrubReader(resp.Body, list)
}

// rewriteToken reads a token-endpoint response (at most MaxBody bytes, identity coding)
// and, when it is a JSON object, replaces each new token by a placeholder (Bindings.Rotate
// for the login whose refresh token the request carried) and every real value of the
// table still in it by its placeholder. A token of a role the login has no binding for is
// removed. Anything it cannot rewrite is an error wrapping errRefresh: the guest then gets
// a 502, never the response.
func (q *request) rewriteToken(resp *http.Response) error {
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return fmt.Errorf("%w: content coding %q", errRefresh, enc)
	}
	max := q.h.t.cfg.MaxBody
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("%w: read: %v", errRefresh, err)
	}
	if int64(len(data)) > max {
		return fmt.Errorf("%w: over %d bytes", errRefresh, max)
	}
	if resp.StatusCode/100 == 2 {
		if data, err = q.rotate(data); err != nil {
			return err
		}
	}
	list, _ := q.h.t.cfg.Bindings.snapshot()
	for _, b := range list {
		data = bytes.ReplaceAll(data, []byte(b.value), []byte(b.placeholder))
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	resp.ContentLength = int64(len(data))
	resp.Header.Set("Content-Length", strconv.Itoa(len(data)))
	return nil
}

// expiresIn returns a token response's expires_in (seconds, RFC 6749 section 5.1), or 0
// when it has none that is a whole number.
func expiresIn(m map[string]any) int64 {
	switch v := m["expires_in"].(type) {
	case json.Number:
		n, err := v.Int64()
		if err == nil {
			return n
		}
	case string: // some servers send it as a string
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil {
			return n
		}
	}
	return 0
}

// rotate replaces the tokens of a successful token response by new placeholders.
func (q *request) rotate(data []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, fmt.Errorf("%w: not a JSON object", errRefresh)
	}
	rotated := false
	for _, f := range tokenFields {
		v, ok := m[f.key].(string)
		if !ok || v == "" {
			continue
		}
		p, ok := q.h.t.cfg.Bindings.Rotate(q.login, f.role, v)
		if !ok {
			delete(m, f.key)
			q.h.t.emit(Event{Kind: EventBlock, Host: q.h.sni, Reason: "token response member " + f.key + " has no binding: removed"})
			continue
		}
		m[f.key] = p
		rotated = true
	}
	if rotated {
		q.h.t.emit(Event{Kind: EventRefresh, Host: q.h.sni, Binding: q.login})
		q.h.t.cfg.Bindings.refreshed(q.login, expiresIn(m), time.Now())
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %v", errRefresh, err)
	}
	return out, nil
}
