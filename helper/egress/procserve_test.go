package egress

import (
	"bytes"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/internal/testenv"

	"golang.org/x/sys/unix"

	"brood.dev/brood/netpolicy"
	"brood.dev/brood/netpolicy/nftrules"
)

// TestPinGateTrustsNoProcess: the daemon answers a (compromised) egress process from the
// session's policy alone. Pins for names the policy refuses, for refused addresses, with
// too many addresses or an unknown operation are refused and write nothing; an allowed
// name is pinned on its entry's ports (never the process's) with the timeout clamped.
func TestPinGateTrustsNoProcess(t *testing.T) {
	entry, err := netpolicy.ParseEntry("ok.pkg.test", "8443/tcp")
	if err != nil {
		t.Fatal(err)
	}
	evil, err := netpolicy.ParsePattern("evil.pkg.test")
	if err != nil {
		t.Fatal(err)
	}
	eff := &netpolicy.Effective{Profile: netpolicy.Locked, Hosts: []netpolicy.Grant{{Entry: entry, Source: netpolicy.Source{Layer: "system"}}},
		Denied: []netpolicy.Denial{{Pattern: evil, Layer: "system"}}}
	fw := &nftrules.Fake{}
	fw.EnsureTable()
	if err := fw.AddSession(nftrules.Session{ID: "s1", ProxyV4: netip.MustParseAddr("10.213.0.1")}); err != nil {
		t.Fatal(err)
	}
	var logBuf bytes.Buffer
	g := &pinGate{eff: eff, fw: fw, id: "s1", dlog: newDecisionLog(&logBuf, 1<<10), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	good, lan := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.168.1.1")
	many := make([]netip.Addr, procMaxPinAddrs+1)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})
	}
	for _, tc := range []struct {
		name string
		m    procMsg
	}{
		{"not in the policy", procMsg{Op: opPin, Name: "other.pkg.test.", Addrs: []netip.Addr{good}, TimeoutS: 60}},
		{"denied", procMsg{Op: opPin, Name: "evil.pkg.test.", Addrs: []netip.Addr{good}, TimeoutS: 60}},
		{"no name", procMsg{Op: opPin, Addrs: []netip.Addr{good}, TimeoutS: 60}},
		{"refused address", procMsg{Op: opPin, Name: "ok.pkg.test.", Addrs: []netip.Addr{lan}, TimeoutS: 60}},
		{"too many addresses", procMsg{Op: opPin, Name: "ok.pkg.test.", Addrs: many, TimeoutS: 60}},
		{"unknown operation", procMsg{Op: "flush", Name: "ok.pkg.test.", Addrs: []netip.Addr{good}}},
	} {
		if r := g.answer(tc.m); r.OK {
			t.Errorf("%s: accepted (%+v)", tc.name, r)
		}
	}
	for _, a := range append(many, lan) {
		for _, p := range []string{"443/tcp", "8443/tcp"} {
			if _, ok := fw.Pinned("s1", a, mustPort(t, p)); ok {
				t.Fatalf("refused request pinned %s %s", a, p)
			}
		}
	}
	if r := g.answer(procMsg{Op: opPin, Name: "OK.pkg.test.", Addrs: []netip.Addr{good}, TimeoutS: 1 << 40}); !r.OK {
		t.Fatalf("allowed pin refused: %s", r.Why)
	}
	if to, ok := fw.Pinned("s1", good, mustPort(t, "8443/tcp")); !ok || to != time.Hour {
		t.Errorf("allowed pin on the entry's port: %v %v, want 1h (clamped)", to, ok)
	}
	if _, ok := fw.Pinned("s1", good, mustPort(t, "443/tcp")); ok {
		t.Error("pinned on a port the entry does not name")
	}
	if r := g.answer(procMsg{Op: opCheck, Name: "ok.pkg.test."}); !r.OK || r.Source != "system" || strings.Join(r.Ports, ",") != "8443/tcp" {
		t.Errorf("check of an allowed name = %+v", r)
	}
	// The log takes one JSON object per entry, on one line; anything else is dropped.
	g.logDecision([]byte("{\"name\":\n\"a.\"}"))
	g.logDecision([]byte(`"not an object"`))
	g.logDecision([]byte(`{"name":"a."}{"name":"b."}`))
	if q, d, _ := g.dlog.counts(); q != 3 || d != 2 || logBuf.String() != "{\"name\":\"a.\"}\n" {
		t.Errorf("log: %d entries, %d dropped, %q", q, d, logBuf.String())
	}
}

func mustPort(t *testing.T, s string) netpolicy.Port {
	p, err := netpolicy.ParsePort(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPinGateCountsProcessPanics: a panic the egress process reports is counted in
// ProxyPanics (which doctor shows) and logged; the gate goes on serving.
func TestPinGateCountsProcessPanics(t *testing.T) {
	mine, theirs := testenv.UnixPair(t, unix.SOCK_SEQPACKET)
	var logBuf bytes.Buffer
	g := &pinGate{eff: &netpolicy.Effective{}, fw: &nftrules.Fake{}, id: "s1", dlog: newDecisionLog(io.Discard, 1<<10),
		log: slog.New(slog.NewTextHandler(&logBuf, nil))}
	done := make(chan error, 1)
	go func() { done <- g.serve(mine) }()
	before := ProxyPanics()
	ctl := &ctlClient{c: theirs, pending: map[uint64]chan procReply{}}
	go ctl.readLoop()
	if err := ctl.send(procMsg{Op: opPanic}); err != nil {
		t.Fatal(err)
	}
	// A check after it is answered: the panic report was read first (one reader, in order).
	if r, err := ctl.call(procMsg{Op: opCheck, Name: "a.test."}); err != nil || r.OK {
		t.Fatalf("check after a panic report = %+v, %v", r, err)
	}
	if n := ProxyPanics() - before; n != 1 {
		t.Errorf("panics counted %d, want 1", n)
	}
	theirs.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logBuf.String(), "recovered a handler panic") {
		t.Errorf("log: %s", logBuf.String())
	}
}
