package fakeprovider

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/websocket"
)

// serve starts p on loopback and returns a client that trusts ca and dials p whatever
// the host name, and p's address.
func serve(t *testing.T, p *Provider, ca *CA) (*http.Client, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Serve(l, ca); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.PEM) {
		t.Fatal("CA PEM does not parse")
	}
	addr := l.Addr().String()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool},
		Dial: func(_, _ string) (net.Conn, error) { return net.Dial("tcp", addr) }}}
	return client, addr
}

// TestProviders: each provider answers its streaming request with the answer, over TLS
// with a certificate for its host that only a client trusting CA accepts, and records the
// request with its key header and SNI; an unknown path is 404.
func TestProviders(t *testing.T) {
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p              *Provider
		path, body     string
		keyHeader, key string
		want           []string // in the answer's body
	}{
		{OpenAI("open-ans"), "/v1/responses", `{"stream":true}`, "Authorization", "Bearer k1",
			[]string{"event: response.output_text.delta", `"delta":"open-ans"`, "event: response.completed"}},
		{Anthropic("anth-ans"), "/v1/messages", `{"model":"m","stream":true}`, "X-Api-Key", "k2",
			[]string{"event: message_start", `"text_delta","text":"anth-ans"`, "event: message_stop"}},
		{Anthropic("anth-ans"), "/v1/messages", `{"model":"m"}`, "X-Api-Key", "k2", []string{`"text":"anth-ans"`, `"stop_reason":"end_turn"`}},
		{Gemini("gem-ans"), "/v1beta/models/g1:streamGenerateContent?alt=sse", `{}`, "X-Goog-Api-Key", "k3",
			[]string{`data: {"candidates":[{"content":{"parts":[{"text":"gem-ans"}]`, `"finishReason":"STOP"`}},
		{Gemini("gem-ans"), "/v1beta/models/g1:generateContent", `{"generationConfig":{"responseMimeType":"application/json"}}`, "X-Goog-Api-Key", "k3",
			[]string{`\"next_speaker\":\"user\"`}},
		{ChatGPT("gpt-ans"), "/backend-api/codex/responses", `{"stream":true}`, "Authorization", "Bearer at1",
			[]string{"event: response.output_text.delta", `"delta":"gpt-ans"`, "event: response.completed"}},
		{OAuthToken("auth.openai.com", map[string]string{"/oauth/token": `{"access_token":"new"}`}), "/oauth/token", `grant_type=refresh_token&refresh_token=rt1`, "Content-Type", "application/x-www-form-urlencoded",
			[]string{`{"access_token":"new"}`}},
		{CodeAssist("ca-ans"), "/v1internal:streamGenerateContent?alt=sse", `{"model":"g1","request":{}}`, "Authorization", "Bearer ya29.x",
			[]string{`data: {"response":{"candidates":[{"content":{"parts":[{"text":"ca-ans"}]`}},
		{CodeAssist("ca-ans"), "/v1internal:loadCodeAssist", `{}`, "Authorization", "Bearer ya29.x", []string{`"cloudaicompanionProject":"brood-e2e-project"`}},
	} {
		client, _ := serve(t, c.p, ca)
		req, _ := http.NewRequest(http.MethodPost, "https://"+c.p.Hosts[0]+c.path, strings.NewReader(c.body))
		req.Header.Set(c.keyHeader, c.key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", c.p.Name, c.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, w := range c.want {
			if resp.StatusCode != 200 || !strings.Contains(string(body), w) {
				t.Errorf("%s %s: status %d, body lacks %q:\n%s", c.p.Name, c.path, resp.StatusCode, w, body)
			}
		}
		reqs := c.p.Requests()
		last := reqs[len(reqs)-1]
		if last.Header.Get(c.keyHeader) != c.key || last.SNI != c.p.Hosts[0] || last.Host != c.p.Hosts[0] || last.Status != 200 {
			t.Errorf("%s recorded %+v", c.p.Name, last)
		}
		resp, err = client.Get("https://" + c.p.Hosts[0] + "/nothing")
		if err != nil || resp.StatusCode != 404 {
			t.Errorf("%s /nothing: %v %v", c.p.Name, resp, err)
		}
	}
	// A client that does not trust the CA fails the handshake.
	p := OpenAI("x")
	_, addr := serve(t, p, ca)
	if _, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "api.openai.com"}); err == nil {
		t.Error("a client without the test CA completed the handshake")
	}
}

// TestOpenAIWebSocket: the Responses API's WebSocket mode answers response.create with the
// same events, recorded as a WS request with the upgrade's key header.
func TestOpenAIWebSocket(t *testing.T) {
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	p := OpenAI("ws-ans")
	_, addr := serve(t, p, ca)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	cfg, err := websocket.NewConfig("wss://api.openai.com/v1/responses", "https://api.openai.com")
	if err != nil {
		t.Fatal(err)
	}
	cfg.TlsConfig = &tls.Config{RootCAs: pool, ServerName: "api.openai.com", NextProtos: []string{"http/1.1"}}
	cfg.Header.Set("Authorization", "Bearer kw")
	raw, err := tls.Dial("tcp", addr, cfg.TlsConfig)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := websocket.NewClient(cfg, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := websocket.Message.Send(ws, `{"type":"response.create","model":"m"}`); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		var m string
		if err := websocket.Message.Receive(ws, &m); err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
		if strings.Contains(m, `"type":"response.completed"`) {
			break
		}
	}
	if !strings.Contains(strings.Join(got, "\n"), `"delta":"ws-ans"`) {
		t.Errorf("events lack the answer:\n%s", strings.Join(got, "\n"))
	}
	ws.Close()
	for _, q := range p.Requests() {
		if q.Method == "WS" && q.Status == 200 && q.Header.Get("Authorization") == "Bearer kw" && q.SNI == "api.openai.com" {
			return
		}
	}
	t.Errorf("no WS request recorded with the key: %+v", p.Requests())
}
