package tlsterm

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBenchReport prints the terminator's cost on loopback (scripts/bench-secrets.sh):
// the added latency of a small request through it against the same request sent
// directly (p50, p99 over benchRequests sequential requests on one kept-alive
// connection), and the throughput of a 10 MiB server-sent event stream through it
// against direct (best of 5 each, interleaved). It asserts nothing about time and runs only when
// BROOD_BENCH_SECRETS=1.
func TestBenchReport(t *testing.T) {
	if os.Getenv("BROOD_BENCH_SECRETS") != "1" {
		t.Skip("set BROOD_BENCH_SECRETS=1 (scripts/bench-secrets.sh)")
	}
	const benchRequests = 2000
	event := []byte("data: " + strings.Repeat("z", 4088) + "\n\n") // 4 KiB
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/sse" {
			io.WriteString(w, `{"ok":true}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range sseTotalSize / len(event) {
			w.Write(event)
		}
	}, provider)
	s := startSession(t, up, provider)
	direct := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: up.roots, ServerName: provider},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", up.addr.String())
		},
	}}
	through := s.client(true, provider)
	// Interleaved, so that the load of a shared machine falls on both alike.
	dl, tl := latencies(t, direct, through, benchRequests)
	var dm, tm float64
	for range 5 {
		dm = max(dm, throughput(t, direct))
		tm = max(tm, throughput(t, through))
	}
	p50, p99 := len(dl)/2, len(dl)*99/100
	t.Logf("direct p50 %v p99 %v; through p50 %v p99 %v", dl[p50], dl[p99], tl[p50], tl[p99])
	fmt.Printf("bench-secrets: added latency p50 %.3f ms, p99 %.3f ms (target <= 2 ms, <= 5 ms)\n",
		ms(tl[p50]-dl[p50]), ms(tl[p99]-dl[p99]))
	fmt.Printf("bench-secrets: SSE 10 MiB throughput %.0f MiB/s through, %.0f MiB/s direct, ratio %.2f (target >= 0.90)\n",
		tm, dm, tm/dm)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// latencies returns the sorted durations of n small requests sent directly and n
// through the terminator, alternating (after 50 of each to warm the connections).
func latencies(t *testing.T, direct, through *http.Client, n int) (d, tr []time.Duration) {
	for i := range n + 50 {
		a, b := once(t, direct, realKey), once(t, through, keyPH)
		if i >= 50 {
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

// throughput returns the rate of reading the 10 MiB stream once, in MiB/s.
func throughput(t *testing.T, c *http.Client) float64 {
	start := time.Now()
	resp, err := c.Get("https://" + provider + "/sse")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n != sseTotalSize/4096*4096 {
		t.Fatalf("streamed %d bytes", n)
	}
	return float64(n) / (1 << 20) / time.Since(start).Seconds()
}
