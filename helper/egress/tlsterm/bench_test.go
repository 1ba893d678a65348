package tlsterm

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/tls"
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
)

// Sizes of the benchmark.
const (
	benchRequests = 2000 // small requests per path and protocol, after benchWarmup
	benchWarmup   = 50
	benchRounds   = 15 // SSE rounds per protocol; each streams once directly, once through
)

// TestBenchReport prints the terminator's cost (scripts/bench-secrets.sh) on loopback,
// where the CPU is the limit, and over a shaped link, where the link is (benchLink),
// for HTTP/2 and for HTTP/1.1, the same protocol on both paths: directly, the client
// speaks it to the fake host; through, to the terminator, which speaks it on to the fake
// host. It prints:
//   - the added latency of a small request (p50 and p99 of benchRequests sequential
//     requests on one kept-alive connection, the two paths alternating, through minus
//     direct);
//   - the throughput of a 10 MiB server-sent event stream (4 KiB events) through the
//     terminator against direct: benchRounds rounds, each streaming once per path
//     (which goes first alternates), the median of the rounds' ratios and their spread;
//   - what each path costs: the process's CPU time per MiB streamed (the fake host, the
//     client and, through, the terminator all run in this process) and socket writes
//     per MiB (write calls on the sending side's TCP connection: the fake host's
//     directly, the terminator's towards the guest through; crypto/tls writes each
//     record by itself, so this is records per MiB unless the terminator gathers a
//     response write's records into one, as it does for HTTP/1.1).
//     cpu(direct)/cpu(through) is the ratio to expect when the CPU, not the pipeline,
//     is the limit; against it, the
//     ratio with a terminator that did nothing but open each record from the host and
//     seal one for the guest (AES-128-GCM, TLS 1.3's suite here; aesFloor).
//
// Then, in the subtest "link" (root only), the same SSE rounds with the fake host behind
// a veth link of a fixed rate in network namespaces the test makes (benchLink).
//
// It asserts nothing about time and runs only when BROOD_BENCH_SECRETS=1; the link
// subtest fails only if a stream outran the link (it did not cross it).
func TestBenchReport(t *testing.T) {
	if os.Getenv("BROOD_BENCH_SECRETS") != "1" {
		t.Skip("set BROOD_BENCH_SECRETS=1 (scripts/bench-secrets.sh)")
	}
	var hostWrites, termWrites atomic.Int64
	up := startUpstreamOn(t, benchHandler, countWrites(&hostWrites), provider)
	s := startSessionOn(t, up, provider, countWrites(&termWrites))
	floor := aesFloor()
	fmt.Printf("bench-secrets: AES-128-GCM open and seal of 1 MiB in 16 KiB records: %.2f ms (the least a terminator adds)\n", floor)
	for _, h2 := range []bool{true, false} {
		proto := map[bool]string{true: "HTTP/2", false: "HTTP/1.1"}[h2]
		direct, through := directClient(up, h2, nil), s.client(h2, provider)
		dl, tl := latencies(t, direct, through)
		p50, p99 := len(dl)/2, len(dl)*99/100
		t.Logf("%s: direct p50 %v p99 %v; through p50 %v p99 %v", proto, dl[p50], dl[p99], tl[p50], tl[p99])
		fmt.Printf("bench-secrets: %s added latency p50 %.3f ms, p99 %.3f ms (target <= 2 ms, <= 5 ms)\n",
			proto, ms(tl[p50]-dl[p50]), ms(tl[p99]-dl[p99]))
		var d, tr []streamRun
		for i := range benchRounds {
			if i%2 == 0 {
				d = append(d, stream(t, direct, &hostWrites, h2))
				tr = append(tr, stream(t, through, &termWrites, h2))
			} else {
				tr = append(tr, stream(t, through, &termWrites, h2))
				d = append(d, stream(t, direct, &hostWrites, h2))
			}
		}
		report(proto, d, tr, floor)
	}
	t.Run("link", func(t *testing.T) {
		if os.Geteuid() != 0 {
			fmt.Println("bench-secrets: the network-bound rows need root (network namespaces, tc); skipped")
		}
		if benchLink == nil {
			t.Skip("the network-bound rows need Linux (network namespaces, tc)")
		}
		benchLink(t, benchHandler)
	})
}

// benchLink, set on Linux only, measures the network-bound rows (bench_link_linux_test.go).
var benchLink func(t *testing.T, h http.HandlerFunc)

// benchHandler is the fake host of the benchmark: a 10 MiB server-sent event stream of
// 4 KiB events at /sse, a small JSON answer at any other path.
func benchHandler(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/sse" {
		io.WriteString(w, `{"ok":true}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for range sseTotalSize / len(benchEvent) {
		w.Write(benchEvent)
	}
}

var benchEvent = []byte("data: " + strings.Repeat("z", 4088) + "\n\n") // 4 KiB

// report prints the SSE rounds of one protocol.
func report(proto string, d, tr []streamRun, floor float64) {
	ratios := make([]float64, len(d))
	for i := range d {
		ratios[i] = tr[i].mibs / d[i].mibs
	}
	rate := func(r streamRun) float64 { return r.mibs }
	cpu := func(r streamRun) float64 { return r.cpuMs }
	writes := func(r streamRun) float64 { return r.writes }
	fmt.Printf("bench-secrets: %s SSE 10 MiB on loopback (CPU-bound: client, terminator and fake host in this process on this machine's cores): "+
		"ratio %.2f median of %d rounds (min %.2f, max %.2f; target >= 0.90); "+
		"median %.0f MiB/s through, %.0f MiB/s direct\n",
		proto, median(ratios), len(ratios), slices.Min(ratios), slices.Max(ratios), medianOf(tr, rate), medianOf(d, rate))
	dc := medianOf(d, cpu)
	fmt.Printf("bench-secrets: %s SSE cost per MiB: CPU %.1f ms through, %.1f ms direct (CPU-bound ratio %.2f; "+
		"%.2f for a terminator that only re-encrypted); socket writes %.0f through, %.0f direct\n",
		proto, medianOf(tr, cpu), dc, dc/medianOf(tr, cpu), dc/(dc+floor), medianOf(tr, writes), medianOf(d, writes))
}

// aesFloor returns the least CPU time, in ms, of opening and sealing 1 MiB as TLS 1.3
// does with AES-128-GCM (RFC 8446 section 5.2): 64 records of 16 KiB, best of 5.
func aesFloor() float64 {
	blk, _ := aes.NewCipher(make([]byte, 16))
	aead, _ := cipher.NewGCM(blk)
	nonce, plain := make([]byte, aead.NonceSize()), make([]byte, 16<<10)
	sealed, opened := make([]byte, 0, len(plain)+aead.Overhead()), make([]byte, 0, len(plain))
	best := time.Duration(1 << 62)
	for range 5 {
		start := time.Now()
		for range 64 {
			sealed = aead.Seal(sealed[:0], nonce, plain, nil)
			opened, _ = aead.Open(opened[:0], nonce, sealed, nil)
		}
		best = min(best, time.Since(start))
	}
	return ms(best)
}

// streamRun is one read of the 10 MiB stream: its rate in MiB/s, the process's CPU time
// per MiB in ms, and its sender's socket writes per MiB.
type streamRun struct{ mibs, cpuMs, writes float64 }

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

func medianOf(runs []streamRun, f func(streamRun) float64) float64 {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	return median(v)
}

// directClient returns a client that reaches the fake host itself through dial (nil: a
// plain net.Dialer), over h2 when h2 is set.
func directClient(up *upstream, h2 bool, dial func(context.Context, string, string) (net.Conn, error)) *http.Client {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	protos := []string{"http/1.1"}
	if h2 {
		protos = []string{"h2"}
	}
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: up.roots, ServerName: provider, NextProtos: protos},
		ForceAttemptHTTP2: h2,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx, "tcp", up.addr.String())
		},
	}}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// latencies returns the sorted durations of benchRequests small requests sent directly
// and as many through the terminator, alternating (after benchWarmup of each to warm the
// connections).
func latencies(t *testing.T, direct, through *http.Client) (d, tr []time.Duration) {
	for i := range benchRequests + benchWarmup {
		a, b := once(t, direct, realKey), once(t, through, keyPH)
		if i >= benchWarmup {
			d, tr = append(d, a), append(tr, b)
		}
	}
	slices.Sort(d)
	slices.Sort(tr)
	return d, tr
}

func once(t *testing.T, c *http.Client, key string) time.Duration {
	req, _ := http.NewRequest("POST", "https://"+provider+"/v1/messages", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(start)
}

// stream reads the 10 MiB stream once through c (checking the protocol is h2's when h2
// is set, HTTP/1.1's otherwise); writes counts the sender's socket writes.
func stream(t *testing.T, c *http.Client, writes *atomic.Int64, h2 bool) streamRun {
	writes.Store(0)
	cpu0, start := cpuTime(), time.Now()
	resp, err := c.Get("https://" + provider + "/sse")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	if n != sseTotalSize/4096*4096 {
		t.Fatalf("streamed %d bytes", n)
	}
	if (resp.ProtoMajor == 2) != h2 {
		t.Fatalf("streamed over %s", resp.Proto)
	}
	mib := float64(n) / (1 << 20)
	return streamRun{mibs: mib / elapsed.Seconds(), cpuMs: ms(cpu) / mib, writes: float64(writes.Load()) / mib}
}

// cpuTime returns the user and system CPU time of the process (getrusage(2),
// RUSAGE_SELF).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// countWrites returns a wrap that counts the Write calls on a connection into n.
func countWrites(n *atomic.Int64) func(net.Conn) net.Conn {
	return func(c net.Conn) net.Conn { return writeCounter{c, n} }
}

type writeCounter struct {
	net.Conn
	n *atomic.Int64
}

func (c writeCounter) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}
