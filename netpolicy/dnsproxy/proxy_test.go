package dnsproxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"brood.dev/brood/netpolicy"
)

// testPolicy allows github.com, *.githubusercontent.com and *.allowed.test (locked profile).
// The hosts come from the system policy, the only layer that may allow a wildcard over a
// private-section public suffix such as githubusercontent.com.
func testPolicy(t testing.TB) *netpolicy.Effective {
	t.Helper()
	var hosts []netpolicy.Entry
	for _, n := range []string{"github.com", "*.githubusercontent.com", "*.allowed.test"} {
		e, err := netpolicy.ParseEntry(n)
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, e)
	}
	locked := netpolicy.Locked
	eff, err := netpolicy.Resolve(netpolicy.Inputs{System: &netpolicy.SystemPolicy{Allow: hosts}, Flags: netpolicy.LayerConfig{Profile: &locked}})
	if err != nil {
		t.Fatal(err)
	}
	return eff
}

var testZone = []string{
	"github.com. 60 IN A 192.0.2.10",
	"github.com. 60 IN AAAA 2001:db8::10",
	"github.com. 60 IN TXT \"v=secret\"",
	"github.com.attacker.test. 60 IN A 192.0.2.66",
	"evilgithub.com. 60 IN A 192.0.2.66",
	"githubusercontent.com. 60 IN A 192.0.2.66",
	"a.b.githubusercontent.com. 120 IN A 192.0.2.11",
	"www.allowed.test. 10 IN CNAME cdn.allowed.test.",
	"cdn.allowed.test. 300 IN A 192.0.2.12",
	"long.allowed.test. 7200 IN A 192.0.2.13",
	"escape.allowed.test. 60 IN CNAME edge.other.test.",
	"edge.other.test. 60 IN A 192.0.2.14",
	"loop.allowed.test. 60 IN CNAME loop2.allowed.test.",
	"loop2.allowed.test. 60 IN CNAME loop.allowed.test.",
	"mixed.allowed.test. 60 IN A 192.0.2.15",
	"mixed.allowed.test. 60 IN A 10.0.0.5",
	"mixed6.allowed.test. 60 IN AAAA 2001:db8::15",
	"mixed6.allowed.test. 60 IN AAAA ::ffff:127.0.0.1",
	"bad1.allowed.test. 60 IN A 127.0.0.1",
	"bad2.allowed.test. 60 IN A 10.0.0.5",
	"bad3.allowed.test. 60 IN A 169.254.169.254",
	"bad4.allowed.test. 60 IN A 100.64.0.1",
	"bad5.allowed.test. 60 IN AAAA ::1",
	"bad6.allowed.test. 60 IN AAAA fd00::1",
	"bad7.allowed.test. 60 IN AAAA ::ffff:127.0.0.1",
	"bad8.allowed.test. 60 IN AAAA 64:ff9b::a9fe:a9fe",
	"zero.allowed.test. 0 IN A 192.0.2.16",
}

type harness struct {
	up     *FakeUpstream
	pins   *netpolicy.RecordingPinner
	proxy  *Proxy
	addr   string
	mu     sync.Mutex
	log    []Decision
	client *dns.Client
}

func newHarness(t testing.TB, junk ...string) *harness {
	t.Helper()
	h := &harness{pins: &netpolicy.RecordingPinner{}, client: &dns.Client{Timeout: 2 * time.Second}}
	var err error
	if h.up, err = NewFakeUpstream(testZone, junk...); err != nil {
		t.Fatal(err)
	}
	upSrv, err := Listen(h.up, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { upSrv.Close(context.Background()) })
	h.proxy, err = New(Config{
		Policy: testPolicy(t), Upstream: NewUpstream(upSrv.Addr().String()), Pinner: h.pins,
		Log: func(d Decision) { h.mu.Lock(); h.log = append(h.log, d); h.mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Listen(h.proxy, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	h.addr = srv.Addr().String()
	return h
}

func (h *harness) ask(t testing.TB, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	r, _, err := h.client.Exchange(m, h.addr)
	if err != nil {
		t.Fatalf("query %s %s: %v", name, dns.Type(qtype), err)
	}
	return r
}

func (h *harness) decisions() []Decision {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.log)
}

func answerAddrs(m *dns.Msg) []netip.Addr {
	var out []netip.Addr
	for _, rr := range m.Answer {
		switch r := rr.(type) {
		case *dns.A:
			a, _ := netip.AddrFromSlice(r.A.To4())
			out = append(out, a)
		case *dns.AAAA:
			a, _ := netip.AddrFromSlice(r.AAAA)
			out = append(out, a)
		}
	}
	return out
}

func TestLabelAnchoring(t *testing.T) {
	h := newHarness(t)
	for _, name := range []string{"evilgithub.com.", "github.com.attacker.test.", "githubusercontent.com."} {
		if r := h.ask(t, name, dns.TypeA); r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
			t.Errorf("%s: rcode %s, %d answers; want REFUSED", name, dns.RcodeToString[r.Rcode], len(r.Answer))
		}
		if h.up.Asked(name) {
			t.Errorf("%s was forwarded upstream", name)
		}
	}
	for name, want := range map[string]string{"GitHub.COM.": "192.0.2.10", "a.b.githubusercontent.com.": "192.0.2.11"} {
		r := h.ask(t, name, dns.TypeA)
		got := answerAddrs(r)
		if r.Rcode != dns.RcodeSuccess || len(got) != 1 || got[0].String() != want {
			t.Errorf("%s: rcode %s, answers %v; want %s", name, dns.RcodeToString[r.Rcode], got, want)
		}
		if !h.pins.Pinned(netip.MustParseAddr(want)) {
			t.Errorf("%s: %s not pinned", name, want)
		}
	}
	if r := h.ask(t, "github.com.", dns.TypeAAAA); len(answerAddrs(r)) != 1 || !h.pins.Pinned(netip.MustParseAddr("2001:db8::10")) {
		t.Errorf("AAAA github.com: %v", r.Answer)
	}
	if h.pins.Pinned(netip.MustParseAddr("192.0.2.66")) {
		t.Error("an address of a refused name was pinned")
	}
}

func TestDeniedNeverForwarded(t *testing.T) {
	h := newHarness(t)
	exfil := "mfrggzdfmztwq2lknnwg23tpobyxe43uov3ho6dzpiqgs3tpnvxxezlt.x.attacker.test."
	cases := []struct {
		name  string
		qtype uint16
	}{
		{exfil, dns.TypeA},
		{exfil, dns.TypeTXT},
		{"github.com.", dns.TypeTXT},
		{"github.com.", dns.TypeANY},
		{"github.com.", dns.TypeHTTPS},
		{"github.com.", dns.TypeMX},
		{"a.allowed.test.", dns.TypeSRV},
		{"github.com.", dns.TypePTR},
		{"5.0.0.10.in-addr.arpa.", dns.TypePTR},
		{"localhost.", dns.TypeA},
		{"weird\\.name.allowed.test.", dns.TypeA},
	}
	for _, c := range cases {
		r := h.ask(t, c.name, c.qtype)
		if r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
			t.Errorf("%s %s: rcode %s; want REFUSED", c.name, dns.Type(c.qtype), dns.RcodeToString[r.Rcode])
		}
	}
	if q := h.up.Queries(); len(q) != 0 {
		t.Errorf("upstream received %v", q)
	}
	if len(h.pins.Pins()) != 0 {
		t.Errorf("pinned %v", h.pins.Pins())
	}
	ds := h.decisions()
	if len(ds) != len(cases) || ds[0].Verdict != Refused || ds[0].Name != exfil || ds[2].Reason != "type TXT not resolved" {
		t.Errorf("decision log = %+v", ds)
	}
}

func TestRefusedRangesPinNothing(t *testing.T) {
	h := newHarness(t)
	for i, typ := range []uint16{dns.TypeA, dns.TypeA, dns.TypeA, dns.TypeA, dns.TypeAAAA, dns.TypeAAAA, dns.TypeAAAA, dns.TypeAAAA} {
		name := "bad" + string(rune('1'+i)) + ".allowed.test."
		r := h.ask(t, name, typ)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
			t.Errorf("%s: rcode %s answers %v; want NOERROR with no records", name, dns.RcodeToString[r.Rcode], r.Answer)
		}
	}
	if p := h.pins.Pins(); len(p) != 0 {
		t.Errorf("pinned %v", p)
	}
	var stripped []string
	for _, d := range h.decisions() {
		for _, s := range d.Stripped {
			stripped = append(stripped, s.Addr.String())
		}
	}
	want := []string{"127.0.0.1", "10.0.0.5", "169.254.169.254", "100.64.0.1", "::1", "fd00::1", "::ffff:127.0.0.1", "64:ff9b::a9fe:a9fe"}
	if !slices.Equal(stripped, want) {
		t.Errorf("stripped = %v, want %v", stripped, want)
	}

	r := h.ask(t, "mixed.allowed.test.", dns.TypeA)
	if got := answerAddrs(r); len(got) != 1 || got[0].String() != "192.0.2.15" {
		t.Errorf("mixed: %v", got)
	}
	r = h.ask(t, "mixed6.allowed.test.", dns.TypeAAAA)
	if got := answerAddrs(r); len(got) != 1 || got[0].String() != "2001:db8::15" {
		t.Errorf("mixed6: %v", got)
	}
	pins := h.pins.Pins()
	if len(pins) != 2 || len(pins[0].Addrs) != 1 || len(pins[1].Addrs) != 1 {
		t.Errorf("pins = %v", pins)
	}
}

func TestCNAMEChainAndTTL(t *testing.T) {
	h := newHarness(t, "evil.test. 60 IN A 192.0.2.99", "github.com. 60 IN A 192.0.2.98")
	r := h.ask(t, "www.allowed.test.", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
		t.Fatalf("www: %v", r)
	}
	c, ok := r.Answer[0].(*dns.CNAME)
	if !ok || c.Target != "cdn.allowed.test." || c.Hdr.Ttl != 10 {
		t.Errorf("CNAME = %v", r.Answer[0])
	}
	if a := r.Answer[1].(*dns.A); a.Hdr.Name != "cdn.allowed.test." || a.Hdr.Ttl != 30 || a.A.String() != "192.0.2.12" {
		t.Errorf("A = %v (TTL must be min(300, pin 30))", r.Answer[1])
	}
	pins := h.pins.Pins()
	if len(pins) != 1 || pins[0].Timeout != 30*time.Second || pins[0].Addrs[0].String() != "192.0.2.12" {
		t.Errorf("pins = %v; want 192.0.2.12 for the clamped minimum 30s", pins)
	}
	if len(pins[0].Ports) != 1 || pins[0].Ports[0] != (netpolicy.Port{Proto: netpolicy.TCP, Num: 443}) {
		t.Errorf("pinned ports = %v, want the entry's default 443/tcp", pins[0].Ports)
	}
	for _, bad := range []string{"192.0.2.99", "192.0.2.98"} {
		if h.pins.Pinned(netip.MustParseAddr(bad)) {
			t.Errorf("record outside the chain pinned: %s", bad)
		}
	}

	r = h.ask(t, "long.allowed.test.", dns.TypeA)
	if pins := h.pins.Pins(); pins[len(pins)-1].Timeout != time.Hour || r.Answer[0].Header().Ttl != 3600 {
		t.Errorf("TTL 7200: pin %v, reply TTL %d; want 1h, 3600", pins[len(pins)-1].Timeout, r.Answer[0].Header().Ttl)
	}
	r = h.ask(t, "zero.allowed.test.", dns.TypeA)
	if pins := h.pins.Pins(); pins[len(pins)-1].Timeout != 30*time.Second || r.Answer[0].Header().Ttl != 0 {
		t.Errorf("TTL 0: pin %v, reply TTL %d; want 30s, 0", pins[len(pins)-1].Timeout, r.Answer[0].Header().Ttl)
	}

	n := len(h.pins.Pins())
	if r := h.ask(t, "loop.allowed.test.", dns.TypeA); r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
		t.Errorf("loop: rcode %s; want REFUSED", dns.RcodeToString[r.Rcode])
	}
	if len(h.pins.Pins()) != n {
		t.Error("a refused chain pinned something")
	}
	// A target no policy names is followed: the question name decides.
	r = h.ask(t, "escape.allowed.test.", dns.TypeA)
	if got := answerAddrs(r); r.Rcode != dns.RcodeSuccess || len(got) != 1 || got[0].String() != "192.0.2.14" {
		t.Errorf("escape.allowed.test -> edge.other.test: rcode %s, %v; want 192.0.2.14", dns.RcodeToString[r.Rcode], got)
	}
	ds := h.decisions()
	if d := ds[len(ds)-1]; d.Name != "escape.allowed.test." || !slices.Equal(d.Chain, []string{"edge.other.test."}) {
		t.Errorf("escape decision = %+v", d)
	}
}

// blockingPinner blocks in Pin until release is closed.
type blockingPinner struct {
	entered chan struct{}
	release chan struct{}
	err     error
}

func (b *blockingPinner) Pin(context.Context, []netip.Addr, []netpolicy.Port, time.Duration) error {
	close(b.entered)
	<-b.release
	return b.err
}

func TestPinBeforeReply(t *testing.T) {
	h := newHarness(t)
	bp := &blockingPinner{entered: make(chan struct{}), release: make(chan struct{})}
	h.proxy.cfg.Pinner = bp
	done := make(chan *dns.Msg)
	go func() {
		m := new(dns.Msg)
		m.SetQuestion("github.com.", dns.TypeA)
		r, _, _ := h.client.Exchange(m, h.addr)
		done <- r
	}()
	<-bp.entered
	select {
	case r := <-done:
		t.Fatalf("reply %v arrived before the pin completed", r)
	case <-time.After(200 * time.Millisecond):
	}
	close(bp.release)
	if r := <-done; r == nil || len(answerAddrs(r)) != 1 {
		t.Fatalf("reply after pin = %v", r)
	}
}

func TestPinFailureIsServfail(t *testing.T) {
	h := newHarness(t)
	h.pins.Err = errors.New("netlink: no buffer space")
	r := h.ask(t, "github.com.", dns.TypeA)
	if r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 0 {
		t.Errorf("rcode %s answers %v; want SERVFAIL and no addresses", dns.RcodeToString[r.Rcode], r.Answer)
	}
	if ds := h.decisions(); ds[0].Verdict != Failed || len(ds[0].Pinned) != 0 {
		t.Errorf("decision = %+v", ds[0])
	}
}

func TestTCPAndMalformed(t *testing.T) {
	h := newHarness(t)
	tcp := &dns.Client{Net: "tcp", Timeout: 2 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion("github.com.", dns.TypeA)
	r, _, err := tcp.Exchange(m, h.addr)
	if err != nil || len(answerAddrs(r)) != 1 {
		t.Fatalf("TCP query: %v %v", r, err)
	}

	two := new(dns.Msg)
	two.SetQuestion("github.com.", dns.TypeA)
	two.Question = append(two.Question, dns.Question{Name: "evil.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	if r, _, err := h.client.Exchange(two, h.addr); err != nil || r.Rcode != dns.RcodeFormatError {
		t.Errorf("two questions: %v %v", r, err)
	}
	notify := new(dns.Msg)
	notify.SetNotify("github.com.")
	if r, _, err := h.client.Exchange(notify, h.addr); err != nil || r.Rcode != dns.RcodeNotImplemented {
		t.Errorf("NOTIFY: %v %v", r, err)
	}
	chaos := new(dns.Msg)
	chaos.SetQuestion("github.com.", dns.TypeA)
	chaos.Question[0].Qclass = dns.ClassCHAOS
	if r, _, err := h.client.Exchange(chaos, h.addr); err != nil || r.Rcode != dns.RcodeRefused {
		t.Errorf("CHAOS: %v %v", r, err)
	}
	if r := h.ask(t, "nothing.allowed.test.", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Errorf("NXDOMAIN passthrough: %s", dns.RcodeToString[r.Rcode])
	}
	if got := len(h.up.Queries()); got != 2 {
		t.Errorf("upstream got %d queries, want 2 (github.com over TCP, nothing.allowed.test)", got)
	}
}

func TestUpstreamDown(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := pc.LocalAddr().String()
	pc.Close()
	pins := &netpolicy.RecordingPinner{}
	p, err := New(Config{Policy: testPolicy(t), Upstream: NewUpstream(dead), Pinner: pins})
	if err != nil {
		t.Fatal(err)
	}
	m := new(dns.Msg)
	m.SetQuestion("github.com.", dns.TypeA)
	if r := p.Handle(context.Background(), m); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("rcode %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
	if _, err := New(Config{Policy: testPolicy(t)}); !errors.Is(err, ErrConfig) {
		t.Errorf("New without upstream: %v", err)
	}
}
