package egress

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/crypto/cryptobyte"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy/dnsproxy"
)

// gateNetnsEnv carries "host,internet,guest1,guest2" netns names to the re-executed test
// binary that plays the helper inside "host".
const gateNetnsEnv = "BROOD_GATE_NETNS"

// TestNameGateNetns runs the name gate as it runs for a VM: the helper's egress layer in a
// netns the test makes, under the systemd unit's capability set (unitCaps), each session's
// egress process (this test binary as
// ProxySubcommand, the session's uid) serving DNS and the gate, and guests in their own
// netns behind veth "taps". Topology (nothing leaves these namespaces):
//
//	guest1 (locked) ─veth─ brd<id1> ┐
//	guest2 (permissive) ─veth─ brd<id2> ┴ host ── up0 172.31.255.1, fd21::1 ──veth── internet
//	internet: a shared "CDN edge" 192.0.2.10 and 2001:db8::10 serving TLS (test CA; every
//	name below) and HTTP on 80, another edge 192.0.2.20 (alt.pkg.test, and edge.cdn.test at
//	the end of cdn.pkg.test's CNAME), a never-resolved host 192.0.2.30, the fake upstream
//	DNS 192.0.2.53.
func TestNameGateNetns(t *testing.T) {
	if v := os.Getenv(gateNetnsEnv); v != "" {
		gateScenario(t, strings.Split(v, ","))
		return
	}
	names := newEgressBed(t)
	host, inet := names[0], names[1]
	ipAll(t, [][]string{
		{"-n", host, "-6", "addr", "add", "fd21::1/126", "dev", "up0", "nodad"},
		{"-n", host, "-6", "route", "add", "default", "via", "fd21::2"},
		{"-n", inet, "-6", "addr", "add", "fd21::2/126", "dev", "up0", "nodad"},
		{"-n", inet, "link", "set", "lo", "up"},
		{"-n", inet, "-6", "addr", "add", "2001:db8::10/128", "dev", "lo"},
		{"-n", inet, "addr", "add", "192.0.2.10/32", "dev", "lo"},
		{"-n", inet, "addr", "add", "192.0.2.20/32", "dev", "lo"},
		{"-n", inet, "addr", "add", "192.0.2.30/32", "dev", "lo"},
	})
	runInHost(t, "TestNameGateNetns", gateNetnsEnv, names, unitCaps)
}

// gateInternet starts the internet's servers in netns inet: TLS echo servers on 443 and
// HTTP servers on 80 (answering "host=<Host>") at each of addrs, each counting the
// connections it accepted. It returns the client TLS configuration (the test CA) and the
// per-address TLS accept counters.
func gateInternet(t *testing.T, inet string, addrs ...string) (*tls.Config, map[string]*atomic.Int64) {
	cert, pool := testenv.TestCA(t, "ok.pkg.test", "evil.pkg.test", "short.pkg.test", "alt.pkg.test", "cdn.pkg.test", "edge.cdn.test")
	accepted := map[string]*atomic.Int64{}
	for _, a := range addrs {
		var tl, hl net.Listener
		err := testenv.InNetns(inet, func() (err error) {
			if tl, err = net.Listen("tcp", net.JoinHostPort(a, "443")); err != nil {
				return err
			}
			hl, err = net.Listen("tcp", net.JoinHostPort(a, "80"))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tl.Close(); hl.Close() })
		n := &atomic.Int64{}
		accepted[a] = n
		go func() {
			for {
				c, err := tl.Accept()
				if err != nil {
					return
				}
				n.Add(1)
				go func() {
					defer c.Close()
					tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
					io.Copy(tc, tc)
				}()
			}
		}()
		go http.Serve(hl, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "host=%s", r.Host) }))
	}
	return &tls.Config{RootCAs: pool}, accepted
}

// tlsIn opens a TCP connection from netns ns to addr and runs a TLS handshake with sni
// over it (the test CA trusted); it returns the connection, or the handshake's error.
func tlsIn(ns, addr, sni string, base *tls.Config, wrap func(net.Conn) net.Conn) (*tls.Conn, error) {
	raw, err := dialIn(ns, "tcp", addr, 3*time.Second)
	if err != nil {
		return nil, err
	}
	cfg := base.Clone()
	cfg.ServerName = sni
	var under net.Conn = raw
	if wrap != nil {
		under = wrap(raw)
	}
	c := tls.Client(under, cfg)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.Handshake(); err != nil {
		raw.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// echo writes msg over c and reads it back.
func echo(c *tls.Conn, msg string) error {
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != msg {
		return fmt.Errorf("echo %q, want %q", buf, msg)
	}
	return nil
}

// rawFirst opens a TCP connection from ns to addr, writes first and returns what it reads
// until the connection ends, and the error that ended it (io.EOF or a reset).
func rawFirst(ns, addr string, first []byte) (string, error) {
	c, err := dialIn(ns, "tcp", addr, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Write(first); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	b, err := io.ReadAll(c)
	if err == nil {
		err = io.EOF
	}
	return string(b), err
}

// ipLiteralHello is a minimal TLS 1.2 ClientHello whose server_name is the IPv4 literal
// name (which RFC 6066 forbids and crypto/tls never sends).
func ipLiteralHello(name string) []byte {
	var b cryptobyte.Builder
	b.AddUint8(22)
	b.AddUint16(0x0301)
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint8(1)
		b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) {
			b.AddUint16(0x0303)
			b.AddBytes(make([]byte, 32))
			b.AddUint8(0)
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint16(0xc02f) })
			b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint8(0) })
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
				b.AddUint16(0)
				b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
					b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
						b.AddUint8(0)
						b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(name)) })
					})
				})
			})
		})
	})
	return b.BytesOrPanic()
}

// segmenter writes its first Write (crypto/tls's ClientHello record) as records of 32
// handshake bytes each, in TCP_NODELAY writes of 7 bytes; later writes pass through.
type segmenter struct {
	net.Conn
	done bool
}

func (w *segmenter) Write(b []byte) (int, error) {
	if w.done || len(b) < 5 || b[0] != 22 {
		return w.Conn.Write(b)
	}
	w.done = true
	w.Conn.(*net.TCPConn).SetNoDelay(true)
	hs := b[5:]
	var out []byte
	for len(hs) > 0 {
		n := min(32, len(hs))
		out = append(out, 22, 3, 1, 0, byte(n))
		out = append(out, hs[:n]...)
		hs = hs[n:]
	}
	for len(out) > 0 {
		n := min(7, len(out))
		if _, err := w.Conn.Write(out[:n]); err != nil {
			return 0, err
		}
		out = out[n:]
	}
	return len(b), nil
}

func gateScenario(t *testing.T, names []string) {
	inet, g1, g2 := names[1], names[2], names[3]
	fakeUpstream(t, inet,
		"ok.pkg.test. 600 IN A 192.0.2.10",
		"ok.pkg.test. 600 IN AAAA 2001:db8::10",
		"evil.pkg.test. 600 IN A 192.0.2.10", // another tenant of the same edge
		"short.pkg.test. 1 IN A 192.0.2.10",  // pinned for the minimum, 30 s
		"alt.pkg.test. 600 IN A 192.0.2.20",
		"cdn.pkg.test. 600 IN CNAME edge.cdn.test.", // allowed, behind a CDN's name
		"edge.cdn.test. 600 IN A 192.0.2.20",
	)
	ccfg, accepted := gateInternet(t, inet, "192.0.2.10", "192.0.2.20", "192.0.2.30", "2001:db8::10")
	e := newBed(t, bedOpts{upstream: "192.0.2.53:53", guests: []string{g1, g2}, ipv6: true, proxyProcess: true,
		policy: "[[host]]\nname = \"ok.pkg.test\"\nports = [\"443\", \"80\"]\n" +
			"[[host]]\nname = \"short.pkg.test\"\n[[host]]\nname = \"alt.pkg.test\"\n[[host]]\nname = \"cdn.pkg.test\"\n"}).e
	s := startLocked(t, e, "gate0001")
	dnsA := net.JoinHostPort(s.Info.DNS, "53")
	resolve := func(name string, qtype uint16) {
		t.Helper()
		if r, err := queryIn(g1, "udp", dnsA, name, qtype); err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
			t.Fatalf("resolve %s: %v, %v", name, r, err)
		}
	}
	// Started first, checked last: short.pkg.test's 30 s pin, and a client that never
	// finishes its ClientHello (the gate's 10 s read deadline).
	resolve("short.pkg.test.", dns.TypeA)
	shortAt := time.Now()
	slowloris, err := dialIn(g1, "tcp", "192.0.2.10:443", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer slowloris.Close()
	slowloris.Write(ipLiteralHello("ok.pkg.test")[:9])
	resolve("ok.pkg.test.", dns.TypeA)
	resolve("ok.pkg.test.", dns.TypeAAAA)
	resolve("alt.pkg.test.", dns.TypeA)
	resolve("cdn.pkg.test.", dns.TypeA)

	t.Run("CDN attack: another tenant's SNI on an allowed address is reset", func(t *testing.T) {
		before := accepted["192.0.2.10"].Load()
		if c, err := tlsIn(g1, "192.0.2.10:443", "evil.pkg.test", ccfg, nil); err == nil {
			c.Close()
			t.Fatal("TLS with evil.pkg.test's SNI to ok.pkg.test's address succeeded")
		} else if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("handshake error %v, want a reset", err)
		}
		if n := accepted["192.0.2.10"].Load(); n != before {
			t.Errorf("the edge accepted %d connections for the refused one", n-before)
		}
	})
	t.Run("allowed SNI is spliced end to end, v4 and v6", func(t *testing.T) {
		for _, addr := range []string{"192.0.2.10:443", "[2001:db8::10]:443"} {
			t0 := time.Now()
			c, err := tlsIn(g1, addr, "ok.pkg.test", ccfg, nil)
			if err != nil {
				t.Fatalf("TLS to %s with the allowed SNI: %v", addr, err)
			}
			hs := time.Since(t0)
			if err := echo(c, "through the gate"); err != nil {
				t.Errorf("%s: %v", addr, err)
			}
			c.Close()
			t.Logf("%s: connect + TLS handshake through the gate %v", addr, hs)
		}
	})
	t.Run("SNI of a name resolved to another address is reset", func(t *testing.T) {
		// alt.pkg.test pinned 192.0.2.20; ok.pkg.test's SNI does not go there.
		if c, err := tlsIn(g1, "192.0.2.20:443", "ok.pkg.test", ccfg, nil); err == nil {
			c.Close()
			t.Fatal("ok.pkg.test's SNI admitted to alt.pkg.test's address")
		}
		if c, err := tlsIn(g1, "192.0.2.20:443", "alt.pkg.test", ccfg, nil); err != nil {
			t.Fatalf("alt.pkg.test to its own address: %v", err)
		} else {
			c.Close()
		}
	})
	t.Run("CNAME chain: the address is admitted for the question name only", func(t *testing.T) {
		if c, err := tlsIn(g1, "192.0.2.20:443", "cdn.pkg.test", ccfg, nil); err != nil {
			t.Fatalf("the question name's SNI to its chain end's address: %v", err)
		} else {
			c.Close()
		}
		if c, err := tlsIn(g1, "192.0.2.20:443", "edge.cdn.test", ccfg, nil); err == nil {
			c.Close()
			t.Fatal("the CNAME target's SNI admitted (the policy allows only the question name)")
		}
	})
	t.Run("never-resolved address on 443 unreachable", func(t *testing.T) {
		if _, err := dialIn(g1, "tcp", "192.0.2.30:443", 3*time.Second); err == nil {
			t.Fatal("TCP to a never-resolved address connected")
		}
		if n := accepted["192.0.2.30"].Load(); n != 0 {
			t.Errorf("the never-resolved host accepted %d connections", n)
		}
	})
	t.Run("no SNI, IP-literal SNI, not TLS: reset", func(t *testing.T) {
		if c, err := tlsIn(g1, "192.0.2.10:443", "", &tls.Config{InsecureSkipVerify: true}, nil); err == nil {
			c.Close()
			t.Error("TLS without SNI admitted")
		}
		for what, first := range map[string][]byte{
			"IP-literal SNI": ipLiteralHello("192.0.2.10"),
			"not TLS":        []byte("GET / HTTP/1.1\r\nHost: ok.pkg.test\r\n\r\n"),
		} {
			if got, err := rawFirst(g1, "192.0.2.10:443", first); !errors.Is(err, syscall.ECONNRESET) || got != "" {
				t.Errorf("%s: read %q, %v; want a reset", what, got, err)
			}
		}
	})
	t.Run("Host on 80: match spliced, mismatch reset", func(t *testing.T) {
		got, err := rawFirst(g1, "192.0.2.10:80", []byte("GET / HTTP/1.1\r\nHost: ok.pkg.test\r\nConnection: close\r\n\r\n"))
		if !strings.HasPrefix(got, "HTTP/1.1 200 OK") || !strings.HasSuffix(got, "host=ok.pkg.test") {
			t.Errorf("GET with the allowed Host: %q, %v", got, err)
		}
		// A second request pipelined on the same connection, for another tenant: the gate
		// added "Connection: close" to the first, so the server answers the first only.
		got, err = rawFirst(g1, "192.0.2.10:80", []byte("GET / HTTP/1.1\r\nHost: ok.pkg.test\r\n\r\nGET / HTTP/1.1\r\nHost: evil.pkg.test\r\n\r\n"))
		if strings.Count(got, "HTTP/1.1 200 OK") != 1 || strings.Contains(got, "evil") || !strings.Contains(got, "Connection: close") {
			t.Errorf("two pipelined requests: %q, %v; want one answer, for ok.pkg.test", got, err)
		}
		for _, req := range []string{
			"GET / HTTP/1.1\r\nHost: evil.pkg.test\r\n\r\n",
			"GET http://evil.pkg.test/ HTTP/1.1\r\nHost: ok.pkg.test\r\n\r\n",
			"GET / HTTP/1.1\r\nHost: alt.pkg.test\r\n\r\n", // allowed name, but on 443 only
		} {
			if got, err := rawFirst(g1, "192.0.2.10:80", []byte(req)); !errors.Is(err, syscall.ECONNRESET) || got != "" {
				t.Errorf("%q: read %q, %v; want a reset", req, got, err)
			}
		}
	})
	t.Run("fragmented ClientHello across segments and records", func(t *testing.T) {
		c, err := tlsIn(g1, "192.0.2.10:443", "ok.pkg.test", ccfg, func(c net.Conn) net.Conn { return &segmenter{Conn: c} })
		if err != nil {
			t.Fatalf("fragmented ClientHello: %v", err)
		}
		if err := echo(c, "fragmented"); err != nil {
			t.Error(err)
		}
		c.Close()
	})
	t.Run("UDP 443 refused, v4 and v6", func(t *testing.T) {
		for _, addr := range []string{"192.0.2.10:443", "[2001:db8::10]:443"} {
			err := testenv.InNetns(g1, func() error {
				c, err := net.Dial("udp", addr)
				if err != nil {
					return err
				}
				defer c.Close()
				c.Write([]byte("quic"))
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, err = c.Read(make([]byte, 4))
				return err
			})
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("UDP to %s: %v, want ECONNREFUSED", addr, err)
			}
		}
	})
	t.Run("the gate's own port: only redirected connections reach it", func(t *testing.T) {
		for _, ap := range []string{net.JoinHostPort(s.Addrs.Host4.String(), fmt.Sprint(s.gatePorts[0])),
			net.JoinHostPort(s.Addrs.Host6.String(), fmt.Sprint(s.gatePorts[1]))} {
			if err := connectIn(g1, ap, time.Second); err == nil {
				t.Errorf("the guest connected to the gate's listener %s directly", ap)
			}
			if c, err := net.DialTimeout("tcp", ap, time.Second); err == nil { // a local process, over lo
				c.Close()
				t.Errorf("a local process connected to the gate's listener %s", ap)
			}
		}
	})
	t.Run("permissive: not gated", func(t *testing.T) {
		p, err := e.Start(api.StartVMArgs{ID: "gate0002", Egress: "permissive"}, 1000, 1000)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Stop(p.id)
		c, err := tlsIn(g2, "192.0.2.10:443", "evil.pkg.test", ccfg, nil)
		if err != nil {
			t.Fatalf("permissive session, direct TLS with any SNI: %v", err)
		}
		c.Close()
		// Measured, not asserted: connect, TLS handshake and one echo, through the gate
		// (locked) and direct (permissive), median of 20 each.
		median := func(ns string) time.Duration {
			var ds []time.Duration
			for range 20 {
				t0 := time.Now()
				c, err := tlsIn(ns, "192.0.2.10:443", "ok.pkg.test", ccfg, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := echo(c, "x"); err != nil {
					t.Fatal(err)
				}
				ds = append(ds, time.Since(t0))
				c.Close()
			}
			slices.Sort(ds)
			return ds[len(ds)/2]
		}
		gated, direct := median(g1), median(g2)
		t.Logf("connect + handshake + echo, median of 20: through the gate %v, direct %v (added %v)", gated, direct, gated-direct)
	})
	var floodAdmitted, floodRefused int
	t.Run("flood: connections past the cap are reset, descriptors stay under the limit", func(t *testing.T) {
		const n = MaxGateConns + 44
		var held []*tls.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for range n {
			c, err := tlsIn(g1, "192.0.2.10:443", "ok.pkg.test", ccfg, nil)
			if err != nil {
				floodRefused++
				continue
			}
			held = append(held, c) // spliced and held: two descriptors in the process
		}
		floodAdmitted = len(held)
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.proc.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d connections: %d spliced and held, %d reset; the egress process holds %d descriptors (RLIMIT_NOFILE %d)",
			n, floodAdmitted, floodRefused, len(fds), ProcMaxFDs)
		// The slowloris connection may still hold one slot.
		if floodAdmitted > MaxGateConns || floodAdmitted < MaxGateConns-1 || len(fds) > ProcMaxFDs {
			t.Errorf("held %d (cap %d), descriptors %d (limit %d)", floodAdmitted, MaxGateConns, len(fds), ProcMaxFDs)
		}
		if r, err := queryIn(g1, "udp", dnsA, "ok.pkg.test.", dns.TypeA); err != nil || r.Rcode != dns.RcodeSuccess {
			t.Errorf("DNS during the flood: %v, %v", r, err)
		}
		for _, c := range held {
			c.Close()
		}
		held = nil
		// The slots come back as the spliced connections end.
		for deadline := time.Now().Add(20 * time.Second); ; {
			c, err := tlsIn(g1, "192.0.2.10:443", "ok.pkg.test", ccfg, nil)
			if err == nil {
				c.Close()
				floodAdmitted++
				break
			}
			floodRefused++
			if time.Now().After(deadline) {
				t.Fatalf("no connection admitted after the flood ended: %v", err)
			}
		}
	})
	t.Run("slowloris reset after the read deadline", func(t *testing.T) {
		slowloris.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := slowloris.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("a client that never finished its ClientHello: %v, want a reset", err)
		}
	})
	t.Run("expiry: after the name's pin expired its SNI no longer admits", func(t *testing.T) {
		// 192.0.2.10 stays pinned (ok.pkg.test, 600 s); short.pkg.test's entry ends at 30 s.
		time.Sleep(time.Until(shortAt.Add(dnsproxy.DefaultMinTTL + time.Second)))
		if c, err := tlsIn(g1, "192.0.2.10:443", "short.pkg.test", ccfg, nil); err == nil {
			c.Close()
			t.Fatal("short.pkg.test admitted after its pin expired")
		}
		if c, err := tlsIn(g1, "192.0.2.10:443", "ok.pkg.test", ccfg, nil); err != nil {
			t.Fatalf("ok.pkg.test on the same address: %v", err)
		} else {
			c.Close()
		}
	})
	t.Run("decisions logged and counted", func(t *testing.T) {
		sum, err := e.Stop(s.id)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("summary: admitted %d refused %d failed %d; refused %v", sum.ConnsAdmitted, sum.ConnsRefused, sum.ConnsFailed, sum.RefusedConns)
		// Admitted: 2 spliced, alt, cdn, two on 80, fragmented, the 20 of the latency
		// measure, the flood's, ok after expiry. Refused: the flood's,
		// evil, ok to .20, edge, no SNI, IP literal, not TLS, three on 80, slowloris, short
		// after expiry.
		if sum.ConnsAdmitted != 28+floodAdmitted || sum.ConnsRefused != 11+floodRefused || sum.RefusedConns["evil.pkg.test -> 192.0.2.10:443"] != 1 ||
			sum.RefusedConns["short.pkg.test -> 192.0.2.10:443"] != 1 || sum.RefusedConns["(no name) -> 192.0.2.10:443"] < 3 {
			t.Errorf("summary = %+v", sum)
		}
	})
}
