package egress

import (
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// recorder is a dns.ResponseWriter that keeps the message written.
type recorder struct {
	dns.ResponseWriter
	msg *dns.Msg
}

func (r *recorder) WriteMsg(m *dns.Msg) error { r.msg = m; return nil }
func (r *recorder) RemoteAddr() net.Addr      { return &net.UDPAddr{} }

func query() *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion("ok.pkg.test.", dns.TypeA)
	return m
}

// TestProxyInflightCap: with MaxDNSInflight queries blocked in the handler, the next one
// is answered SERVFAIL at once (never reaching the handler) and counted; a slot freed
// serves again.
func TestProxyInflightCap(t *testing.T) {
	lim := newProxyLimits("s1", slog.New(slog.NewTextHandler(io.Discard, nil)))
	entered, release := make(chan struct{}), make(chan struct{})
	h := lim.handler(dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		entered <- struct{}{}
		<-release
		m := new(dns.Msg)
		w.WriteMsg(m.SetReply(r))
	}))
	var wg sync.WaitGroup
	for range MaxDNSInflight {
		wg.Add(1)
		go func() { defer wg.Done(); h.ServeDNS(&recorder{}, query()) }()
		<-entered
	}
	w := &recorder{}
	h.ServeDNS(w, query())
	if w.msg == nil || w.msg.Rcode != dns.RcodeServerFailure || lim.QueriesShed.Load() != 1 {
		t.Fatalf("query over the cap: %v, shed %d; want SERVFAIL, 1", w.msg, lim.QueriesShed.Load())
	}
	close(release)
	wg.Wait()
	go func() { <-entered }()
	w = &recorder{}
	h.ServeDNS(w, query())
	if w.msg == nil || w.msg.Rcode != dns.RcodeSuccess {
		t.Fatalf("query after the slots were freed: %v", w.msg)
	}
}

// TestProxyHandlerPanic: a panicking proxy handler answers SERVFAIL and is counted; the
// slot it held is freed.
func TestProxyHandlerPanic(t *testing.T) {
	lim := newProxyLimits("s1", slog.New(slog.NewTextHandler(io.Discard, nil)))
	h := lim.handler(dns.HandlerFunc(func(dns.ResponseWriter, *dns.Msg) { panic("parser bug") }))
	before := ProxyPanics()
	for range MaxDNSInflight + 1 {
		w := &recorder{}
		h.ServeDNS(w, query())
		if w.msg == nil || w.msg.Rcode != dns.RcodeServerFailure {
			t.Fatalf("panicking handler answered %v, want SERVFAIL", w.msg)
		}
	}
	if n := ProxyPanics() - before; n != MaxDNSInflight+1 {
		t.Errorf("panics counted %d, want %d", n, MaxDNSInflight+1)
	}
	if lim.QueriesShed.Load() != 0 {
		t.Errorf("panics leaked in-flight slots: %d queries shed", lim.QueriesShed.Load())
	}
}
