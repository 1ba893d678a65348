package dnsproxy

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"

	"brood.dev/brood/netpolicy"
	"brood.dev/brood/netpolicy/nftrules"
)

// benchPinner returns the real nft pinner working in a throw-away netns when running as
// root with ip(8) available (so that the measured latency includes the netlink set insert),
// else a RecordingPinner.
func benchPinner(b *testing.B) (netpolicy.Pinner, string) {
	if os.Getenv("BROOD_BENCH_FAKE_PIN") != "" {
		return &netpolicy.RecordingPinner{}, "fake pinner (BROOD_BENCH_FAKE_PIN set)"
	}
	if os.Geteuid() != 0 {
		return &netpolicy.RecordingPinner{}, "fake pinner (not root)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return &netpolicy.RecordingPinner{}, "fake pinner (no ip command)"
	}
	name := fmt.Sprintf("broodbench%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		b.Fatalf("ip netns add: %v %s", err, out)
	}
	b.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	f, err := os.Open("/run/netns/" + name)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	fw, err := nftrules.NewNFT(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fw.Close() })
	s := nftrules.Session{ID: "b1", ProxyV4: netip.MustParseAddr("10.99.0.1")}
	if err := fw.EnsureTable(); err != nil {
		b.Fatal(err)
	}
	if err := fw.AddSession(s); err != nil {
		b.Fatal(err)
	}
	return nftrules.SetPinner{FW: fw, ID: s.ID}, "nft set pinner in a netns"
}

// benchSetup starts the fake upstream and a proxy in front of it on loopback.
func benchSetup(b *testing.B) (upAddr, proxyAddr string) {
	up, err := NewFakeUpstream(testZone)
	if err != nil {
		b.Fatal(err)
	}
	upSrv, err := Listen(up, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { upSrv.Close(context.Background()) })
	pinner, kind := benchPinner(b)
	b.Log("pinner: " + kind)
	var failed atomic.Int64
	p, err := New(Config{Policy: testPolicy(b), Upstream: NewUpstream(upSrv.Addr().String()), Pinner: pinner,
		Log: func(d Decision) {
			if d.Verdict != Allowed && failed.Add(1) <= 3 {
				b.Logf("decision %+v", d)
			}
		}})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := Listen(p, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close(context.Background()) })
	return upSrv.Addr().String(), srv.Addr().String()
}

func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// BenchmarkAddedLatency asks an allowed name (github.com A) b.N times directly from the
// fake upstream and b.N times through the proxy, interleaved, over UDP on loopback, and
// reports medians and 99th percentiles of both and of the difference (the proxy's added
// latency, including the pin). brood's targets: added ≤ 0.5 ms median, ≤ 2 ms p99.
func BenchmarkAddedLatency(b *testing.B) {
	upAddr, proxyAddr := benchSetup(b)
	c := &dns.Client{Timeout: 2 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion("github.com.", dns.TypeA)
	ask := func(addr string) time.Duration {
		start := time.Now()
		r, _, err := c.Exchange(m, addr)
		if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			b.Fatalf("query via %s: %v %v", addr, r, err)
		}
		return time.Since(start)
	}
	for range 50 { // warm up both paths
		ask(upAddr)
		ask(proxyAddr)
	}
	direct := make([]time.Duration, 0, b.N)
	proxied := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		direct = append(direct, ask(upAddr))
		proxied = append(proxied, ask(proxyAddr))
	}
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(quantile(direct, 0.5)), "direct-p50-µs")
	b.ReportMetric(us(quantile(direct, 0.99)), "direct-p99-µs")
	b.ReportMetric(us(quantile(proxied, 0.5)), "proxy-p50-µs")
	b.ReportMetric(us(quantile(proxied, 0.99)), "proxy-p99-µs")
	b.ReportMetric(us(quantile(proxied, 0.5)-quantile(direct, 0.5)), "added-p50-µs")
	b.ReportMetric(us(quantile(proxied, 0.99)-quantile(direct, 0.99)), "added-p99-µs")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkSustained sends b.N queries through the proxy paced at 1,000 queries/s (each
// from its own goroutine, 2 s timeout, no retry) and reports the achieved rate and how many
// were lost (timed out, failed, or answered anything but one address).
func BenchmarkSustained(b *testing.B) {
	_, proxyAddr := benchSetup(b)
	c := &dns.Client{Timeout: 2 * time.Second}
	names := []string{"github.com.", "a.b.githubusercontent.com.", "cdn.allowed.test.", "mixed.allowed.test."}
	var lost atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		// Pace by schedule, not by ticker (a ticker drops ticks when the sender falls
		// behind); a late sender catches up.
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Millisecond)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := new(dns.Msg)
			m.SetQuestion(names[i%len(names)], dns.TypeA)
			r, _, err := c.Exchange(m, proxyAddr)
			if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
				if lost.Add(1) <= 3 {
					rc := "no reply"
					if r != nil {
						rc = dns.RcodeToString[r.Rcode]
					}
					b.Logf("lost query %d: %s, %v", i, rc, err)
				}
			}
		}()
	}
	sent := time.Since(start)
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/sent.Seconds(), "queries/s")
	b.ReportMetric(float64(lost.Load()), "lost")
	b.ReportMetric(0, "ns/op")
}
