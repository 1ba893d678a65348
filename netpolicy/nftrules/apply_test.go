package nftrules

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/netpolicy"
)

var tcp443 = []netpolicy.Port{{Proto: netpolicy.TCP, Num: 443}}

// listJSON returns `nft -j list ruleset` of netns ns with handles, counters and element
// expiry removed, for comparison.
func listJSON(t *testing.T, ns string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(nsRun(t, ns, "nft", "-j", "list", "ruleset")), &v); err != nil {
		t.Fatal(err)
	}
	var strip func(any) any
	strip = func(x any) any {
		switch x := x.(type) {
		case map[string]any:
			delete(x, "handle")
			delete(x, "expires")
			delete(x, "metainfo")
			for k, v := range x {
				x[k] = strip(v)
			}
		case []any:
			var out []any
			for _, v := range x {
				if m, ok := v.(map[string]any); ok && len(m) == 1 && m["metainfo"] != nil {
					continue
				}
				out = append(out, strip(v))
			}
			return out
		}
		return x
	}
	return strip(v)
}

// TestApplyMatchesNft applies the Go-built ruleset in one netns and the hand-written nft
// version in another, and requires the kernel to list identical rulesets.
func TestApplyMatchesNft(t *testing.T) {
	nsGo, n := testNetns(t)
	nsNft, _ := testNetns(t)
	if err := n.EnsureTable(); err != nil {
		t.Fatal(err)
	}
	if err := n.AddSession(goldenSession()); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "session.nft")
	if err := os.WriteFile(f, []byte(goldenNft(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	nsRun(t, nsNft, "nft", "-f", f)
	got, want := listJSON(t, nsGo), listJSON(t, nsNft)
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		diffLines(t, string(g), string(w))
	}
	// The same at the level of registers and bytes, as the kernel returns them.
	if g, w := listNetlink(t, nsGo), listNetlink(t, nsNft); g != w {
		diffLines(t, g, w)
	}
}

// listNetlink returns the rules and set elements of `nft --debug=netlink list ruleset` in
// netns ns, with rule handles removed and each run of element lines sorted: a hash set
// lists its elements in the order of its (randomly seeded) hash.
func listNetlink(t *testing.T, ns string) string {
	t.Helper()
	var b strings.Builder
	var run []string
	flush := func() {
		slices.Sort(run)
		for _, l := range run {
			b.WriteString(l + "\n")
		}
		run = run[:0]
	}
	for _, line := range strings.Split(nsRun(t, ns, "nft", "--debug=netlink", "list", "ruleset"), "\n") {
		switch {
		case strings.HasPrefix(line, "inet brood "):
			f := strings.Fields(line)
			line = strings.Join(f[:3], " ") // family, table, chain or @set; drop handle, position
		case strings.HasPrefix(line, "\telement"):
			// nft's element userdata only tells nft how to print an open-ended interval.
			line, _, _ = strings.Cut(line, "  userdata = ")
			run = append(run, line)
			continue
		case strings.HasPrefix(line, "  ["):
		default:
			continue
		}
		flush()
		b.WriteString(line + "\n")
	}
	flush()
	if b.Len() == 0 {
		t.Fatalf("no rules listed in %s", ns)
	}
	return b.String()
}

func TestSessionLifecycle(t *testing.T) {
	ns, n := testNetns(t)
	if err := n.DeleteSession("a1"); err != nil {
		t.Fatalf("delete before the table exists: %v", err)
	}
	for range 2 {
		if err := n.EnsureTable(); err != nil {
			t.Fatalf("EnsureTable: %v", err)
		}
	}
	if rules := strings.Count(nsRun(t, ns, "nft", "list", "chain", "inet", "brood", FwdChainName), "\n\t\t"); rules != 7 {
		t.Errorf("after two EnsureTable: %d lines in %s, want the hook line and 6 rules", rules, FwdChainName)
	}
	s1, s2 := goldenSession(), goldenSession()
	s1.ID, s2.ID = "a1", "a12"
	for _, s := range []Session{s1, s2} {
		if err := n.AddSession(s); err != nil {
			t.Fatal(err)
		}
	}
	addr := netip.MustParseAddr("192.0.2.7")
	if err := n.Pin("a1", []netip.Addr{addr, netip.MustParseAddr("2001:db8::7")}, tcp443, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	list := nsRun(t, ns, "nft", "list", "ruleset")
	for _, want := range []string{
		"set sa1_v4 {", "192.0.2.7 . tcp . 443 timeout 1m30s expires", "2001:db8::7 . tcp . 443 timeout 1m30s expires",
		`"brda1" : jump sa1_fwd`, `"brda12" : jump sa12_fwd`, `"brda1" : jump sa1_in`, "ip daddr . meta l4proto . th dport @sa12_v4 accept",
	} {
		if !strings.Contains(list, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, list)
		}
	}
	if set := nsRun(t, ns, "nft", "list", "set", "inet", "brood", "sa12_v4"); strings.Contains(set, "192.0.2.7") {
		t.Errorf("pin of session a1 visible in a12:\n%s", set)
	}
	// Re-pinning with another timeout takes that timeout.
	for _, to := range []string{"2h", "3h"} {
		d, _ := time.ParseDuration(to)
		if err := n.Pin("a1", []netip.Addr{addr}, tcp443, d); err != nil {
			t.Fatal(err)
		}
		set := nsRun(t, ns, "nft", "list", "set", "inet", "brood", "sa1_v4")
		if !strings.Contains(set, "192.0.2.7 . tcp . 443 timeout "+to+" expires") {
			t.Errorf("timeout not changed to %s:\n%s", to, set)
		}
	}

	if err := n.DeleteSession("a1"); err != nil {
		t.Fatal(err)
	}
	list = nsRun(t, ns, "nft", "list", "ruleset")
	if strings.Contains(list, "sa1_") || strings.Contains(list, `"brda1"`) || !strings.Contains(list, "chain sa12_fwd") || !strings.Contains(list, `"brda12" : jump sa12_in`) {
		t.Errorf("after deleting a1:\n%s", list)
	}
	if err := n.DeleteSession("a1"); err != nil {
		t.Errorf("second delete: %v", err)
	}
	for range 2 {
		if err := n.Cleanup(); err != nil {
			t.Fatal(err)
		}
	}
	if list := nsRun(t, ns, "nft", "list", "ruleset"); strings.TrimSpace(list) != "" {
		t.Errorf("after cleanup:\n%s", list)
	}
}

func TestPinExpires(t *testing.T) {
	ns, n := testNetns(t)
	if err := n.EnsureTable(); err != nil {
		t.Fatal(err)
	}
	s := goldenSession()
	if err := n.AddSession(s); err != nil {
		t.Fatal(err)
	}
	ports := []netpolicy.Port{{Proto: netpolicy.TCP, Num: 22}, {Proto: netpolicy.UDP, Num: 443}}
	if err := (SetPinner{FW: n, ID: s.ID}).Pin(t.Context(), []netip.Addr{netip.MustParseAddr("192.0.2.8")}, ports, time.Second); err != nil {
		t.Fatal(err)
	}
	set := nsRun(t, ns, "nft", "list", "set", "inet", "brood", "st1_v4")
	if !strings.Contains(set, "192.0.2.8 . tcp . 22 timeout 1s") || !strings.Contains(set, "192.0.2.8 . udp . 443 timeout 1s") {
		t.Fatalf("pin not visible:\n%s", set)
	}
	time.Sleep(1500 * time.Millisecond)
	if set := nsRun(t, ns, "nft", "list", "set", "inet", "brood", "st1_v4"); strings.Contains(set, "192.0.2.8") {
		t.Errorf("pin did not expire:\n%s", set)
	}
}

// TestBadElementsNeverReachRules: values that are not exactly one allowed address fail
// before anything is sent, and the ruleset is unchanged.
func TestBadElementsNeverReachRules(t *testing.T) {
	ns, n := testNetns(t)
	if err := n.EnsureTable(); err != nil {
		t.Fatal(err)
	}
	if err := n.AddSession(goldenSession()); err != nil {
		t.Fatal(err)
	}
	before := nsRun(t, ns, "nft", "list", "ruleset")
	for _, s := range []string{"0.0.0.0/0", "192.0.2.1 }", "192.0.2.1}; flush ruleset", "１９２.０.２.１",
		"192.0.2.1-192.0.2.9", "*", "::/0", "fe80::1%eth0", "::ffff:192.0.2.1", "10.0.0.5", "169.254.169.254", ""} {
		if a, err := ParseElements([]string{"192.0.2.3", s}); !errors.Is(err, ErrBadElement) {
			t.Errorf("ParseElements(%q) = %v, %v; want ErrBadElement", s, a, err)
		}
	}
	for _, a := range []netip.Addr{{}, netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::ffff:192.0.2.1"),
		netip.MustParseAddr("64:ff9b::a9fe:a9fe"), netip.MustParseAddr("fd00::1")} {
		if err := n.Pin("t1", []netip.Addr{netip.MustParseAddr("192.0.2.3"), a}, tcp443, time.Minute); !errors.Is(err, ErrBadElement) {
			t.Errorf("Pin(%v) err = %v, want ErrBadElement", a, err)
		}
	}
	ok := []netip.Addr{netip.MustParseAddr("192.0.2.3")}
	if err := n.Pin("t1", ok, tcp443, 0); !errors.Is(err, ErrBadElement) {
		t.Errorf("Pin with zero timeout: %v", err)
	}
	for _, ports := range [][]netpolicy.Port{nil, {{Proto: netpolicy.TCP}}, {{Proto: "sctp", Num: 443}}} {
		if err := n.Pin("t1", ok, ports, time.Minute); !errors.Is(err, ErrBadElement) {
			t.Errorf("Pin with ports %v: %v", ports, err)
		}
	}
	if after := nsRun(t, ns, "nft", "list", "ruleset"); after != before {
		t.Errorf("ruleset changed:\n%s\n---\n%s", before, after)
	}
}
