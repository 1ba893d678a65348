package tlsterm

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

func ok(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }

// TestSwapHeaders: each header form a CLI uses carries the real value upstream, over
// HTTP/1.1 and HTTP/2, and the guest never sees it.
func TestSwapHeaders(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "proto=%s", r.Proto)
			}, provider)
			s := startSession(t, up, provider)
			req, _ := http.NewRequest("GET", "https://"+provider+"/v1/models?key="+keyPH, nil)
			req.Header.Set("Authorization", "Bearer "+keyPH)
			req.Header.Set("x-api-key", keyPH)
			req.Header.Set("x-goog-api-key", keyPH)
			req.Header.Set("X-Custom", "a "+accessPH+" b")
			resp, body := mustDo(t, s.client(h2, provider), req)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if bytes.Contains(body, []byte(realKey)) {
				t.Fatal("the response carries the real key")
			}
			reqs, _ := up.requests()
			if len(reqs) != 1 {
				t.Fatalf("upstream saw %d requests", len(reqs))
			}
			got := reqs[0]
			for _, hd := range []string{"x-api-key", "x-goog-api-key"} {
				if v := got.Header.Get(hd); v != realKey {
					t.Errorf("%s upstream = %q, want the real key", hd, v)
				}
			}
			if v := got.Header.Get("Authorization"); v != "Bearer "+realKey {
				t.Errorf("Authorization upstream = %q", v)
			}
			if v := got.Header.Get("X-Custom"); v != "a "+realAccess+" b" {
				t.Errorf("X-Custom upstream = %q", v)
			}
			if v := got.URL.Query().Get("key"); v != realKey {
				t.Errorf("query key upstream = %q", v)
			}
			if want := map[bool]int{false: 1, true: 2}[h2]; got.ProtoMajor != want {
				t.Errorf("upstream protocol %s, want the guest's (HTTP/%d) end to end", got.Proto, want)
			}
			if n := len(s.eventsOf(EventSwap)); n != 5 {
				t.Errorf("%d swap events, want 5 (four headers, the query)", n)
			}
		})
	}
}

// TestSwapBasic: git's Basic credentials (x-access-token:PLACEHOLDER) carry the real
// value upstream.
func TestSwapBasic(t *testing.T) {
	up := startUpstream(t, ok, provider)
	s := startSession(t, up, provider)
	req, _ := http.NewRequest("GET", "https://"+provider+"/org/repo.git/info/refs", nil)
	req.SetBasicAuth("x-access-token", keyPH)
	if resp, _ := mustDo(t, s.client(false, provider), req); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	reqs, _ := up.requests()
	user, pass, okb := reqs[0].BasicAuth()
	if !okb || user != "x-access-token" || pass != realKey {
		t.Fatalf("upstream Basic = %q, %q (%v)", user, pass, okb)
	}
}

// TestBlocked: every way a placeholder bound elsewhere (or nowhere) leaves is refused
// with 403, counted, and never reaches the upstream.
func TestBlocked(t *testing.T) {
	up := startUpstream(t, ok, provider)
	s := startSession(t, up, provider)
	c := s.client(false, provider)
	basic := base64.StdEncoding.EncodeToString([]byte("u:" + otherPH))
	cases := map[string]func() *http.Request{
		"header": func() *http.Request {
			r, _ := http.NewRequest("GET", "https://"+provider+"/", nil)
			r.Header.Set("Authorization", "Bearer "+otherPH)
			return r
		},
		"basic": func() *http.Request {
			r, _ := http.NewRequest("GET", "https://"+provider+"/", nil)
			r.Header.Set("Authorization", "Basic "+basic)
			return r
		},
		"unbound": func() *http.Request {
			r, _ := http.NewRequest("GET", "https://"+provider+"/", nil)
			r.Header.Set("x-api-key", nowherePH)
			return r
		},
		"refresh-token-in-header": func() *http.Request {
			r, _ := http.NewRequest("GET", "https://"+provider+"/", nil)
			r.Header.Set("Authorization", "Bearer "+refreshPH)
			return r
		},
		"query": func() *http.Request {
			r, _ := http.NewRequest("GET", "https://"+provider+"/x?k="+otherPH, nil)
			return r
		},
		"path": func() *http.Request {
			r, _ := http.NewRequest("GET", "https://"+provider+"/x/"+otherPH, nil)
			return r
		},
		"streamed-body": func() *http.Request {
			body := strings.Repeat("a", 100_000) + otherPH + strings.Repeat("b", 100_000)
			return must(http.NewRequest("POST", "https://"+provider+"/v1/chat", io.NopCloser(strings.NewReader(body))))
		},
		"gzip-body": func() *http.Request {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			fmt.Fprintf(zw, `{"messages":["%s"]}`, otherPH)
			zw.Close()
			r, _ := http.NewRequest("POST", "https://"+provider+"/v1/chat", &buf)
			r.Header.Set("Content-Encoding", "gzip")
			return r
		},
		"gzip-bound-placeholder": func() *http.Request {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			fmt.Fprintf(zw, `{"key":"%s"}`, keyPH)
			zw.Close()
			r, _ := http.NewRequest("POST", "https://"+provider+"/v1/chat", &buf)
			r.Header.Set("Content-Encoding", "gzip")
			return r
		},
		"brotli-body": func() *http.Request {
			r, _ := http.NewRequest("POST", "https://"+provider+"/v1/chat", strings.NewReader("\x1b\x00"))
			r.Header.Set("Content-Encoding", "br")
			return r
		},
		"gzip-over-cap": func() *http.Request {
			r, _ := http.NewRequest("POST", "https://"+provider+"/v1/chat", bytes.NewReader(bytes.Repeat([]byte{1}, maxBodyTest+1)))
			r.Header.Set("Content-Encoding", "gzip")
			return r
		},
		"websocket": func() *http.Request {
			r, _ := http.NewRequest("GET", "https://"+provider+"/ws", nil)
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
			return r
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			before := len(s.eventsOf(EventBlock))
			resp, body := mustDo(t, c, mk())
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("status %d (%s), want 403", resp.StatusCode, body)
			}
			if got := len(s.eventsOf(EventBlock)); got != before+1 {
				t.Fatalf("%d block events, want %d", got, before+1)
			}
		})
	}
	_, bodies := up.requests()
	for _, b := range bodies {
		if bytes.Contains(b, []byte(otherPH)) {
			t.Fatal("the upstream received a placeholder bound elsewhere")
		}
	}
	if n := s.term.Stats().Hosts[provider].Blocks; n != len(cases) {
		t.Fatalf("Stats blocks = %d, want %d", n, len(cases))
	}
}

// TestGzipCleanPasses: a compressed body without a placeholder is forwarded as it is.
func TestGzipCleanPasses(t *testing.T) {
	up := startUpstream(t, ok, provider)
	s := startSession(t, up, provider)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	io.WriteString(zw, `{"messages":["hello"]}`)
	zw.Close()
	sent := append([]byte(nil), buf.Bytes()...)
	r, _ := http.NewRequest("POST", "https://"+provider+"/v1/chat", &buf)
	r.Header.Set("Content-Encoding", "gzip")
	if resp, b := mustDo(t, s.client(true, provider), r); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	_, bodies := up.requests()
	if !bytes.Equal(bodies[0], sent) {
		t.Fatal("the compressed body was changed on the way")
	}
}

// TestStreamedBodyWithOwnPlaceholder: a streamed body keeps a placeholder bound to its
// own host as it is (bodies are swapped only for token endpoints) and passes whole.
func TestStreamedBodyWithOwnPlaceholder(t *testing.T) {
	up := startUpstream(t, ok, provider)
	s := startSession(t, up, provider)
	body := strings.Repeat("x", 300_000) + keyPH + strings.Repeat("y", 70_001)
	r, _ := http.NewRequest("POST", "https://"+provider+"/v1/chat", io.NopCloser(strings.NewReader(body)))
	if resp, b := mustDo(t, s.client(false, provider), r); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	_, bodies := up.requests()
	if string(bodies[0]) != body {
		t.Fatalf("upstream body differs: %d bytes, want %d", len(bodies[0]), len(body))
	}
}

// TestHostMustEqualSNI: HTTP/1.1 Host and HTTP/2 :authority other than the SNI are
// refused, on the first request and on a later one of the same connection.
func TestHostMustEqualSNI(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			up := startUpstream(t, ok, provider, other)
			s := startSession(t, up, provider)
			c := s.client(h2, provider)
			first, _ := http.NewRequest("GET", "https://"+provider+"/", nil)
			if resp, _ := mustDo(t, c, first); resp.StatusCode != 200 {
				t.Fatalf("first request: status %d", resp.StatusCode)
			}
			second, _ := http.NewRequest("GET", "https://"+provider+"/", nil)
			second.Host = other
			second.Header.Set("Authorization", "Bearer "+otherPH)
			resp, _ := mustDo(t, c, second)
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("second request with Host %s: status %d, want 403", other, resp.StatusCode)
			}
			port, _ := http.NewRequest("GET", "https://"+provider+"/", nil)
			port.Host = provider + ":8443"
			if resp, _ := mustDo(t, c, port); resp.StatusCode != http.StatusForbidden {
				t.Fatalf("Host with another port: status %d, want 403", resp.StatusCode)
			}
			if reqs, _ := up.requests(); len(reqs) != 1 {
				t.Fatalf("upstream saw %d requests, want 1", len(reqs))
			}
			if !h2 {
				return // HTTP/1.1 closes after a refusal
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.conns != 1 {
				t.Fatalf("%d guest connections, want the requests on one", s.conns)
			}
		})
	}
}

// TestHTTP1SecondRequestSameConn: on one HTTP/1.1 keep-alive connection a second request
// with a different Host is refused.
func TestHTTP1SecondRequestSameConn(t *testing.T) {
	up := startUpstream(t, ok, provider, other)
	s := startSession(t, up, provider)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.ca.CertPEM())
	tc, err := tls.Dial("tcp", s.addr, &tls.Config{RootCAs: pool, ServerName: provider, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	io.WriteString(tc, "GET / HTTP/1.1\r\nHost: "+provider+"\r\n\r\nGET / HTTP/1.1\r\nHost: "+other+"\r\n\r\n")
	var statuses []int
	br := bufio.NewReader(tc)
	for range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("read response %d: %v", len(statuses)+1, err)
		}
		io.Copy(io.Discard, resp.Body)
		statuses = append(statuses, resp.StatusCode)
	}
	if statuses[0] != 200 || statuses[1] != 403 {
		t.Fatalf("statuses %v, want [200 403]", statuses)
	}
}

// TestClientHelloOtherName: a ClientHello naming another server than the admitted SNI
// gets no certificate.
func TestClientHelloOtherName(t *testing.T) {
	up := startUpstream(t, ok, provider)
	s := startSession(t, up, provider)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.ca.CertPEM())
	_, err := tls.Dial("tcp", s.addr, &tls.Config{RootCAs: pool, ServerName: other})
	if err == nil {
		t.Fatal("handshake for another name succeeded")
	}
	if err := <-s.errs; !errors.Is(err, ErrName) {
		t.Fatalf("Terminate: %v, want ErrName", err)
	}
}

// TestUntrustedUpstream: an upstream whose certificate the trust store does not hold is
// never sent the request: the guest gets 502.
func TestUntrustedUpstream(t *testing.T) {
	up := startUpstream(t, ok, provider)
	stranger := startUpstream(t, ok, provider)
	up.roots = stranger.roots // verify up's certificate against another CA
	s := startSession(t, up, provider)
	r, _ := http.NewRequest("GET", "https://"+provider+"/", nil)
	r.Header.Set("Authorization", "Bearer "+keyPH)
	if resp, _ := mustDo(t, s.client(false, provider), r); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
	if reqs, _ := up.requests(); len(reqs) != 0 {
		t.Fatal("the untrusted upstream got the request")
	}
}

// TestTokenEndpoint: the refresh token in a form or JSON body is swapped (escaped for the
// body's type), the response's new tokens reach the guest as new placeholders only, and
// the next request with the new access placeholder carries the new real token.
func TestTokenEndpoint(t *testing.T) {
	for _, form := range []bool{true, false} {
		t.Run(fmt.Sprintf("form=%v", form), func(t *testing.T) {
			newAccess, newRefresh := "access-NEW-"+strings.Repeat("7", 30), "refresh-NEW-"+strings.Repeat("8", 30)
			auth := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"access_token":%q,"refresh_token":%q,"id_token":"idtok-REAL-0000000000000000000000","expires_in":3600,"echo":%q}`, newAccess, newRefresh, realRefresh)
			}, authHost)
			s := startSession(t, auth, authHost)
			var r *http.Request
			if form {
				r, _ = http.NewRequest("POST", tokenURL, strings.NewReader(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refreshPH}}.Encode()))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			} else {
				r, _ = http.NewRequest("POST", tokenURL, strings.NewReader(`{"grant_type":"refresh_token","refresh_token":"`+refreshPH+`"}`))
				r.Header.Set("Content-Type", "application/json")
			}
			r.Header.Set("Accept-Encoding", "gzip")
			resp, body := mustDo(t, s.client(!form, authHost), r)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			_, bodies := auth.requests()
			if form {
				v, _ := url.ParseQuery(string(bodies[0]))
				if v.Get("refresh_token") != realRefresh {
					t.Fatalf("upstream form refresh_token = %q", v.Get("refresh_token"))
				}
			} else {
				var m map[string]string
				json.Unmarshal(bodies[0], &m)
				if m["refresh_token"] != realRefresh {
					t.Fatalf("upstream JSON refresh_token = %q", m["refresh_token"])
				}
			}
			for _, real := range []string{newAccess, newRefresh, realRefresh, realAccess, "idtok-REAL"} {
				if bytes.Contains(body, []byte(real)) {
					t.Fatalf("the guest got a real token: %s", body)
				}
			}
			var got map[string]any
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("response %q: %v", body, err)
			}
			b := s.term.cfg.Bindings
			if v, _ := b.Value(loginName, "access"); v != newAccess {
				t.Fatal("the table does not hold the new access token")
			}
			if v, _ := b.Value(loginName, "refresh"); v != newRefresh {
				t.Fatal("the table does not hold the new refresh token")
			}
			list, _ := b.snapshot()
			ph := map[string]string{}
			for _, e := range list {
				ph[e.value] = e.placeholder
			}
			if _, ok := got["id_token"]; ok {
				t.Fatal("a token of a role the login has no binding for was kept")
			}
			if got["access_token"] != ph[newAccess] || got["refresh_token"] != ph[newRefresh] {
				t.Fatalf("response tokens %v are not the new placeholders", got)
			}
			if len(s.eventsOf(EventRefresh)) != 1 {
				t.Fatal("no refresh event")
			}
		})
	}
}

// TestRefreshedAccessTokenUsed: after a refresh, the new access placeholder is swapped for
// the new real access token on the API host.
func TestRefreshedAccessTokenUsed(t *testing.T) {
	up := startUpstream(t, ok, provider)
	s := startSession(t, up, provider)
	b := s.term.cfg.Bindings
	newAccess := "access-NEW-" + strings.Repeat("9", 30)
	p, okr := b.Rotate(loginName, "access", newAccess)
	if !okr || p == accessPH || !strings.HasPrefix(p, "access-") || len(p) != len(newAccess) {
		t.Fatalf("Rotate = %q, %v", p, okr)
	}
	r, _ := http.NewRequest("GET", "https://"+provider+"/", nil)
	r.Header.Set("Authorization", "Bearer "+p)
	mustDo(t, s.client(false, provider), r)
	reqs, _ := up.requests()
	if reqs[0].Header.Get("Authorization") != "Bearer "+newAccess {
		t.Fatal("the new placeholder did not carry the new token")
	}
}

// TestTokenBodyOverCap: a token-endpoint body over MaxBody is refused.
func TestTokenBodyOverCap(t *testing.T) {
	up := startUpstream(t, ok, authHost)
	s := startSession(t, up, authHost)
	r, _ := http.NewRequest("POST", tokenURL, strings.NewReader("refresh_token="+refreshPH+"&pad="+strings.Repeat("p", maxBodyTest)))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, _ := mustDo(t, s.client(false, authHost), r); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d, want 403", resp.StatusCode)
	}
}

// TestTokenResponseCompressed: a token response in a coding the request did not ask for
// never reaches the guest.
func TestTokenResponseCompressed(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "br")
		io.WriteString(w, "opaque")
	}, authHost)
	s := startSession(t, up, authHost)
	r, _ := http.NewRequest("POST", tokenURL, strings.NewReader("refresh_token="+refreshPH))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, _ := mustDo(t, s.client(false, authHost), r); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
}

// TestSSEStreams: a 10 MiB server-sent event stream passes whole, and its first event
// reaches the guest while the upstream still holds the rest back.
func TestSSEStreams(t *testing.T) {
	release := make(chan struct{})
	event := []byte("data: " + strings.Repeat("z", 1017) + "\n\n") // 1 KiB
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(event)
		w.(http.Flusher).Flush()
		<-release
		for range sseTotalSize/len(event) - 1 {
			w.Write(event)
		}
	}, provider)
	s := startSession(t, up, provider)
	for _, h2 := range []bool{false, true} {
		r, _ := http.NewRequest("GET", "https://"+provider+"/v1/stream", nil)
		resp, err := s.client(h2, provider).Do(r)
		if err != nil {
			t.Fatal(err)
		}
		first := make([]byte, len(event))
		if _, err := io.ReadFull(resp.Body, first); err != nil {
			t.Fatalf("first event: %v", err)
		}
		release <- struct{}{}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n+int64(len(first)) != int64(sseTotalSize/len(event)*len(event)) {
			t.Fatalf("h2=%v: streamed %d bytes, %v", h2, n+int64(len(first)), err)
		}
	}
}

// TestEventsHoldNoValue: no event, error or refusal text names a value.
func TestEventsHoldNoValue(t *testing.T) {
	up := startUpstream(t, ok, provider)
	s := startSession(t, up, provider)
	c := s.client(false, provider)
	for _, v := range []string{keyPH, otherPH, nowherePH} {
		r, _ := http.NewRequest("GET", "https://"+provider+"/", nil)
		r.Header.Set("Authorization", "Bearer "+v)
		_, body := mustDo(t, c, r)
		for _, secret := range []string{realKey, realOther, nowhereReal, keyPH, otherPH, nowherePH} {
			if strings.Contains(string(body), secret) {
				t.Fatalf("a response body names a value: %q", body)
			}
		}
	}
	s.mu.Lock()
	all, _ := json.Marshal(s.events)
	s.mu.Unlock()
	for _, secret := range []string{realKey, realOther, nowhereReal, keyPH, otherPH, nowherePH} {
		if strings.Contains(string(all), secret) {
			t.Fatalf("events name a value: %s", all)
		}
	}
}

// TestCA: leaves verify against the CA for its names only, and the CA's name constraints
// refuse a leaf for any other name even if one were minted.
func TestCA(t *testing.T) {
	ca, err := NewCA([]string{provider, "*.wild.test"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	for _, n := range []string{provider, "a.wild.test"} {
		leaf, err := ca.Leaf(n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: n, Roots: pool}); err != nil {
			t.Fatalf("verify %s: %v", n, err)
		}
		if again, _ := ca.Leaf(n); again != leaf {
			t.Fatalf("leaf for %s not cached", n)
		}
	}
	if _, err := ca.Leaf(other); !errors.Is(err, ErrName) {
		t.Fatalf("Leaf(%s) = %v, want ErrName", other, err)
	}
	forged, err := ca.mint(other) // what a bug in Covers would mint
	if err != nil {
		t.Fatal(err)
	}
	if _, err := forged.Leaf.Verify(x509.VerifyOptions{DNSName: other, Roots: pool}); err == nil {
		t.Fatal("a leaf outside the name constraints verified")
	}
	if d := ca.Certificate().NotAfter.Sub(time.Now()); d > CAValidity {
		t.Fatalf("CA valid for %v", d)
	}
}

func must(r *http.Request, err error) *http.Request {
	if err != nil {
		panic(err)
	}
	return r
}

// rawExchange sends raw on a new HTTP/1.1 connection to the session and returns the
// status of the first response.
func rawExchange(t *testing.T, s *session, raw string) int {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.ca.CertPEM())
	tc, err := tls.Dial("tcp", s.addr, &tls.Config{RootCAs: pool, ServerName: provider, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	io.WriteString(tc, raw)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestRawRefusals: an absolute URL naming another host, CONNECT, and request trailers
// are refused; none reaches the upstream.
func TestRawRefusals(t *testing.T) {
	up := startUpstream(t, ok, provider, other)
	s := startSession(t, up, provider)
	for name, raw := range map[string]string{
		"absolute URL": "GET https://" + other + "/ HTTP/1.1\r\nHost: " + provider + "\r\n\r\n",
		"CONNECT":      "CONNECT " + provider + ":443 HTTP/1.1\r\nHost: " + provider + ":443\r\n\r\n",
		"trailers": "POST / HTTP/1.1\r\nHost: " + provider + "\r\nTransfer-Encoding: chunked\r\nTrailer: X-Key\r\n\r\n" +
			"2\r\nhi\r\n0\r\nX-Key: " + otherPH + "\r\n\r\n",
	} {
		if code := rawExchange(t, s, raw); code != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403", name, code)
		}
	}
	if reqs, _ := up.requests(); len(reqs) != 0 {
		t.Fatalf("upstream saw %d requests", len(reqs))
	}
}

// TestRotateKeepsOlder: a refresh adds a binding and keeps the older ones, up to
// maxRotated refreshes; then the oldest refreshed one goes, never a session binding.
func TestRotateKeepsOlder(t *testing.T) {
	b, err := NewBindings(testSecrets())
	if err != nil {
		t.Fatal(err)
	}
	base := b.Len()
	for i := range maxRotated + 5 {
		if _, ok := b.Rotate(loginName, "access", fmt.Sprintf("access-NEW-%030d", i)); !ok {
			t.Fatal("Rotate failed")
		}
	}
	if b.Len() != base+maxRotated {
		t.Fatalf("%d bindings, want %d", b.Len(), base+maxRotated)
	}
	list, _ := b.snapshot()
	if list[2].value != realAccess {
		t.Fatal("the session's own binding was dropped")
	}
	if v, _ := b.Value(loginName, "access"); v != fmt.Sprintf("access-NEW-%030d", maxRotated+4) {
		t.Fatalf("latest value %q", v)
	}
	if _, ok := b.Rotate("no-such-login", "access", "x-REAL-00000000000000000000"); ok {
		t.Fatal("Rotate of an unknown login succeeded")
	}
}

// TestEchoScrubbed: a bound host that echoes the swapped header hands the guest the
// placeholder, not the real value, in an identity-coded response.
func TestEchoScrubbed(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(r.Header.Get("Authorization"))))
		io.WriteString(w, r.Header.Get("Authorization"))
	}, provider)
	s := startSession(t, up, provider)
	for _, h2 := range []bool{false, true} {
		r, _ := http.NewRequest("GET", "https://"+provider+"/echo", nil)
		r.Header.Set("Authorization", "Bearer "+keyPH)
		r.Header.Set("Accept-Encoding", "identity")
		_, body := mustDo(t, s.client(h2, provider), r)
		if string(body) != "Bearer "+keyPH {
			t.Fatalf("h2=%v: guest got %q", h2, body)
		}
	}
	reqs, _ := up.requests()
	if reqs[0].Header.Get("Authorization") != "Bearer "+realKey {
		t.Fatal("the upstream did not get the real value")
	}
}

// TestRefreshOnlyInTokenBody: a refresh token's placeholder is swapped only in the body
// of its token endpoint: in a header or the URL of its own host, or in another path's
// body, it is refused; so is any placeholder used as a header name.
func TestRefreshOnlyInTokenBody(t *testing.T) {
	up := startUpstream(t, ok, authHost)
	s := startSession(t, up, authHost)
	c := s.client(false, authHost)
	header := must(http.NewRequest("GET", "https://"+authHost+"/userinfo", nil))
	header.Header.Set("Authorization", "Bearer "+refreshPH)
	query := must(http.NewRequest("GET", "https://"+authHost+"/oauth/token?refresh_token="+refreshPH, nil))
	otherPath := must(http.NewRequest("POST", "https://"+authHost+"/oauth/revoke", strings.NewReader("token="+refreshPH)))
	name := must(http.NewRequest("GET", "https://"+authHost+"/", nil))
	name.Header.Set("X-"+keyPH, "1")
	for label, r := range map[string]*http.Request{"header": header, "query": query, "other path body": otherPath, "header name": name} {
		if resp, _ := mustDo(t, c, r); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403", label, resp.StatusCode)
		}
	}
	_, bodies := up.requests()
	for _, b := range bodies {
		if bytes.Contains(b, []byte(realRefresh)) || bytes.Contains(b, []byte(refreshPH)) {
			t.Fatal("the refresh token left outside its token endpoint")
		}
	}
}
