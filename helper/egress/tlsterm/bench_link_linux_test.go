package tlsterm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/http2"

	"brood.dev/brood/internal/testenv"
)

// The shaped link of the network-bound SSE measurement.
const (
	benchLinkRounds = 9                     // SSE rounds per protocol and rate
	linkBurst       = 32 << 10              // bytes the token bucket lets through at once
	linkQueue       = 10 * time.Millisecond // the queue each end holds, in time at the link's rate
	linkClientEnd   = "benchc"              // the veth end in the client namespace
	linkHostEnd     = "benchh"              // the veth end in the host namespace
	// linkBoundShare is the least share of the link's rate the direct path's median must
	// reach for a row to count as network-bound: TCP/IPv4 with timestamps and Ethernet
	// framing leave 1448 of each 1514 bytes the bucket counts (95.6 %), TLS records a
	// little less.
	linkBoundShare = 0.9
)

// linkRates are the rates of the shaped link in Mbit/s (10^6 bit/s, as tc(8) counts).
var linkRates = []uint64{200, 50}

// Addresses on the veth pair, in 10.0.0.0/8 (RFC 1918), only inside the two namespaces.
var (
	linkClientIP = netip.MustParsePrefix("10.203.0.1/30")
	linkHostIP   = netip.MustParsePrefix("10.203.0.2/30")
)

// shapedLink is a veth pair between two network namespaces the test made: the client
// namespace, from which the direct client and the terminator dial, and the host
// namespace, in which the fake host listens. Each end's root qdisc is a token bucket
// filter (tc-tbf(8)) of the same rate, so both directions are shaped.
type shapedLink struct {
	clientNS, hostNS string
	ends             []linkEnd
}

type linkEnd struct {
	h    *netlink.Handle
	link netlink.Link
}

// newShapedLink makes the namespaces and the veth pair, addressed and up, unshaped.
func newShapedLink(t *testing.T) *shapedLink {
	t.Helper()
	l := &shapedLink{clientNS: testenv.NewNetns(t, "bc"), hostNS: testenv.NewNetns(t, "bh")}
	handle := func(name string) (*netlink.Handle, netns.NsHandle) {
		ns, err := netns.GetFromName(name)
		if err != nil {
			t.Fatalf("open netns %s: %v", name, err)
		}
		t.Cleanup(func() { ns.Close() })
		h, err := netlink.NewHandleAt(ns)
		if err != nil {
			t.Fatalf("netlink handle in %s: %v", name, err)
		}
		t.Cleanup(h.Close)
		return h, ns
	}
	ch, _ := handle(l.clientNS)
	hh, hns := handle(l.hostNS)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: linkClientEnd}, PeerName: linkHostEnd,
		PeerNamespace: netlink.NsFd(int(hns))}
	if err := ch.LinkAdd(veth); err != nil {
		t.Fatalf("add veth %s/%s: %v", linkClientEnd, linkHostEnd, err)
	}
	for _, e := range []struct {
		h    *netlink.Handle
		name string
		ip   netip.Prefix
	}{{ch, linkClientEnd, linkClientIP}, {hh, linkHostEnd, linkHostIP}} {
		link, err := e.h.LinkByName(e.name)
		if err != nil {
			t.Fatalf("find %s: %v", e.name, err)
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: e.ip.Addr().AsSlice(), Mask: net.CIDRMask(e.ip.Bits(), 32)}}
		if err := e.h.AddrAdd(link, addr); err != nil {
			t.Fatalf("address %s: %v", e.name, err)
		}
		if err := e.h.LinkSetUp(link); err != nil {
			t.Fatalf("set %s up: %v", e.name, err)
		}
		l.ends = append(l.ends, linkEnd{e.h, link})
	}
	return l
}

// setRate makes both ends' root qdisc a token bucket filter of mbit Mbit/s with a
// bucket of linkBurst bytes and a queue of linkQueue at that rate, and checks the
// kernel reports it.
func (l *shapedLink) setRate(t *testing.T, mbit uint64) {
	t.Helper()
	rate := mbit * 1_000_000 / 8 // bytes/s
	for _, e := range l.ends {
		q := &netlink.Tbf{
			QdiscAttrs: netlink.QdiscAttrs{LinkIndex: e.link.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
			Rate:       rate,
			Buffer:     netlink.Xmittime(rate, linkBurst),
			Limit:      uint32(rate*uint64(linkQueue)/uint64(time.Second)) + linkBurst,
		}
		if err := e.h.QdiscReplace(q); err != nil {
			t.Fatalf("tbf %d Mbit/s on %s: %v", mbit, e.link.Attrs().Name, err)
		}
		qs, err := e.h.QdiscList(e.link)
		if err != nil {
			t.Fatalf("list qdiscs of %s: %v", e.link.Attrs().Name, err)
		}
		if !slices.ContainsFunc(qs, func(q netlink.Qdisc) bool { tb, ok := q.(*netlink.Tbf); return ok && tb.Rate == rate }) {
			t.Fatalf("%s: no tbf of %d bytes/s among %v", e.link.Attrs().Name, rate, qs)
		}
	}
}

// dial connects from the client namespace (the socket stays there).
func (l *shapedLink) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := testenv.InNetns(l.clientNS, func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// startLinkHost serves h over TLS (h2 and http/1.1) for provider from a listener made in
// the host namespace, on linkHostIP.
func startLinkHost(t *testing.T, l *shapedLink, h http.HandlerFunc) *upstream {
	t.Helper()
	ca, err := NewCA([]string{provider}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{roots: x509.NewCertPool()}
	u.roots.AddCert(ca.Certificate())
	var ln net.Listener
	if err := testenv.InNetns(l.hostNS, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(linkHostIP.Addr(), 0).String())
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", l.hostNS, err)
	}
	u.addr = ln.Addr().(*net.TCPAddr).AddrPort()
	srv := &http.Server{Handler: h, ErrorLog: discardLog, TLSConfig: &tls.Config{NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) { return ca.Leaf(hi.ServerName) }}}
	if err := http2.ConfigureServer(srv, nil); err != nil {
		t.Fatal(err)
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return u
}

// startLinkSession is a terminator listening on loopback in the test's own namespace
// (where the guest-side client is) that reaches up through dial.
func startLinkSession(t *testing.T, up *upstream, dial func(context.Context, string, string) (net.Conn, error)) *session {
	t.Helper()
	ca, err := NewCA([]string{provider}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBindings(testSecrets())
	if err != nil {
		t.Fatal(err)
	}
	s := &session{ca: ca}
	s.term, err = New(Config{CA: ca, Bindings: b, RootCAs: up.roots, MaxBody: maxBodyTest, DialContext: dial})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.term.Terminate(ctx, c, provider, up.addr)
		}
	}()
	return s
}

func init() { benchLink = benchShapedLink }

// benchShapedLink is the network-bound half of TestBenchReport: the fake host sits behind a
// shaped veth link (shapedLink) that both the direct client and the terminator cross;
// the guest-side client reaches the terminator on loopback, as the guest reaches the
// session's egress process on its own machine. For each rate in linkRates and each
// protocol it streams benchLinkRounds rounds as the loopback half does and prints the
// median ratio, its spread and each path's median rate. It fails if a stream outran the
// link by more than the bucket allows, which would mean it did not cross it.
func benchShapedLink(t *testing.T, h http.HandlerFunc) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "ip")
	l := newShapedLink(t)
	up := startLinkHost(t, l, h)
	s := startLinkSession(t, up, l.dial)
	var writes atomic.Int64 // not reported here
	for _, mbit := range linkRates {
		l.setRate(t, mbit)
		ceiling := float64(mbit*1_000_000/8) / (1 << 20) // MiB/s
		for _, h2 := range []bool{true, false} {
			proto := map[bool]string{true: "HTTP/2", false: "HTTP/1.1"}[h2]
			direct, through := directClient(up, h2, l.dial), s.client(h2, provider)
			once(t, direct, realKey) // handshakes before the first round
			once(t, through, keyPH)
			var d, tr []streamRun
			for i := range benchLinkRounds {
				if i%2 == 0 {
					d = append(d, stream(t, direct, &writes, h2))
					tr = append(tr, stream(t, through, &writes, h2))
				} else {
					tr = append(tr, stream(t, through, &writes, h2))
					d = append(d, stream(t, direct, &writes, h2))
				}
			}
			if fast := fastest(append(slices.Clone(d), tr...)); fast > ceiling*1.05 {
				t.Errorf("%s at %d Mbit/s: a stream ran at %.1f MiB/s, over the link's %.1f MiB/s: it did not cross the link", proto, mbit, fast, ceiling)
			}
			reportLink(proto, mbit, ceiling, d, tr)
			direct.CloseIdleConnections()
			through.CloseIdleConnections()
		}
	}
}

// fastest returns the highest rate of runs, in MiB/s.
func fastest(runs []streamRun) float64 {
	var m float64
	for _, r := range runs {
		m = max(m, r.mibs)
	}
	return m
}

// reportLink prints the rounds of one protocol at one rate.
func reportLink(proto string, mbit uint64, ceiling float64, d, tr []streamRun) {
	ratios := make([]float64, len(d))
	for i := range d {
		ratios[i] = tr[i].mibs / d[i].mibs
	}
	rate := func(r streamRun) float64 { return r.mibs }
	cpu := func(r streamRun) float64 { return r.cpuMs }
	share := medianOf(d, rate) / ceiling
	bound := "network-bound"
	if share < linkBoundShare {
		bound = "NOT network-bound in this run"
	}
	fmt.Printf("bench-secrets: %s SSE 10 MiB over a %d Mbit/s link (fake host in another netns behind a token bucket; %s: direct at %.0f%% of the link's %.1f MiB/s): "+
		"ratio %.2f median of %d rounds (min %.2f, max %.2f; direct %.1f MiB/s, through %.1f MiB/s; CPU per MiB %.1f ms direct, %.1f ms through) (target >= 0.90)\n",
		proto, mbit, bound, 100*share, ceiling, median(ratios), len(ratios), slices.Min(ratios), slices.Max(ratios),
		medianOf(d, rate), medianOf(tr, rate), medianOf(d, cpu), medianOf(tr, cpu))
}
