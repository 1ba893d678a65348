// Package fakeprovider is a stand-in for the LLM providers' HTTPS APIs in end-to-end
// tests: a test certificate authority, and one TLS server per provider that answers the
// provider's streaming API with a fixed text and records every request it receives. The
// agents reach it by the provider's real host name (api.openai.com, ...), which the test's
// fake upstream DNS answers with the server's address inside a network namespace the test
// made; the certificate the server presents is issued by CA for that name, so an agent
// that trusts CA (and only then) completes the handshake.
//
// Each provider speaks only what the agents' non-interactive modes were seen to ask for;
// anything else is answered 404 and recorded, so a test can print what an agent asked.
//
// Privilege: none; tests only. It listens on the listener it is given (the caller makes
// it inside its own network namespace).
package fakeprovider

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"sync"
	"time"
)

// CA is a throw-away certificate authority: its certificate (PEM, for the guest's trust)
// and key (to issue server certificates).
type CA struct {
	// PEM is the CA certificate, PEM-encoded ("CERTIFICATE" block).
	PEM  []byte
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA valid for one day from an hour ago (clock skew between host and guest).
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate test CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "brood end-to-end test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create test CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse test CA certificate: %w", err)
	}
	return &CA{PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert: cert, key: key}, nil
}

// Issue returns a server certificate for names (DNS SANs), signed by ca.
func (ca *CA) Issue(names ...string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate server key for %v: %w", names, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue server certificate for %v: %w", names, err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// Request is one request a provider received.
type Request struct {
	Method, Path, Query string
	// Host is the Host header (the name the client asked for); SNI the TLS server name.
	Host, SNI string
	Header    http.Header
	Body      []byte
	// Status is what the provider answered.
	Status int
}

// Provider is one fake API: its host names, the answer it streams and what it received.
type Provider struct {
	// Name identifies it in messages ("openai", "anthropic", "gemini").
	Name string
	// Hosts are the names its certificate covers; the first is the API host.
	Hosts []string
	// Answer is the text every completion returns.
	Answer string

	handler func(p *Provider, w http.ResponseWriter, r *http.Request, body []byte) int
	mu      sync.Mutex
	reqs    []Request
	answers map[string]string // OAuthToken's, by path
	srv     *http.Server
}

// Requests returns a copy of the requests received so far, in order.
func (p *Provider) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.reqs...)
}

// Serve answers on l with TLS (a certificate from ca for p.Hosts) until Close. It returns
// once the server runs.
func (p *Provider) Serve(l net.Listener, ca *CA) error {
	cert, err := ca.Issue(p.Hosts...)
	if err != nil {
		return err
	}
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(p.serveHTTP),
		ReadHeaderTimeout: time.Minute,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}},
	}
	go p.srv.ServeTLS(l, "", "")
	return nil
}

// Close stops the server.
func (p *Provider) Close() error {
	if p.srv == nil {
		return nil
	}
	return p.srv.Close()
}

// maxBody caps a recorded request body (bytes): agents send their whole system prompt
// and tool list, a few hundred KiB at most.
const maxBody = 8 << 20

func (p *Provider) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, maxBody))
	rec := Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Host: r.Host, Header: r.Header.Clone(), Body: body}
	if r.TLS != nil {
		rec.SNI = r.TLS.ServerName
	}
	rw := &recordingWriter{ResponseWriter: w, p: p, rec: rec}
	status := p.handler(p, rw, r, body)
	rw.once.Do(func() { rw.rec.Status = status; p.record(rw.rec) }) // a hijacked (WebSocket) request
}

// recordingWriter records the request when its status is written, before any byte of
// the answer: a client that has read the answer finds the request in Requests.
type recordingWriter struct {
	http.ResponseWriter
	p    *Provider
	rec  Request
	once sync.Once
}

func (w *recordingWriter) WriteHeader(code int) {
	w.once.Do(func() { w.rec.Status = code; w.p.record(w.rec) })
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	w.once.Do(func() { w.rec.Status = http.StatusOK; w.p.record(w.rec) })
	return w.ResponseWriter.Write(b)
}

func (w *recordingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *recordingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("fake %s: connection cannot be hijacked", w.p.Name)
	}
	return h.Hijack()
}

func (p *Provider) record(r Request) {
	p.mu.Lock()
	p.reqs = append(p.reqs, r)
	p.mu.Unlock()
}

// sse writes events as a text/event-stream: each an optional event name and a data line.
func sse(w http.ResponseWriter, events [][2]string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	for _, e := range events {
		if e[0] != "" {
			fmt.Fprintf(w, "event: %s\n", e[0])
		}
		fmt.Fprintf(w, "data: %s\n\n", e[1])
		if f != nil {
			f.Flush()
		}
	}
}

func notFound(w http.ResponseWriter) int {
	http.Error(w, `{"error":{"message":"not served by the fake provider","type":"invalid_request_error"}}`, http.StatusNotFound)
	return http.StatusNotFound
}
