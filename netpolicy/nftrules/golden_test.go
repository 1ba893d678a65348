package nftrules

import (
	"encoding/binary"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"brood.dev/brood/netpolicy"
)

var update = flag.Bool("update", false, "rewrite testdata/session.netlink from nft --debug=netlink (needs root and nft)")

// goldenSession is the session testdata/session.nft.in describes.
func goldenSession() Session {
	return Session{
		ID:        "t1",
		ProxyV4:   netip.MustParseAddr("10.99.0.1"),
		ProxyV6:   netip.MustParseAddr("fd99::1"),
		GuestV4:   netip.MustParseAddr("10.99.0.2"),
		GuestV6:   netip.MustParseAddr("fd99::2"),
		GuestLL:   netip.MustParseAddr("fe80::5054:ff:fe62:7264"),
		GatePort4: 40443,
		GatePort6: 40444,
	}
}

func goldenRulesets(t *testing.T) []*Ruleset {
	t.Helper()
	rs, err := SessionRuleset(goldenSession())
	if err != nil {
		t.Fatal(err)
	}
	return []*Ruleset{BaseRuleset(), rs}
}

// goldenNft returns testdata/session.nft.in with the refused prefixes filled in.
func goldenNft(t *testing.T) string {
	t.Helper()
	in, err := os.ReadFile("testdata/session.nft.in")
	if err != nil {
		t.Fatal(err)
	}
	v4, v6 := netpolicy.RefusedPrefixes()
	join := func(ps []netip.Prefix) string {
		var ss []string
		for _, p := range ps {
			ss = append(ss, p.String())
		}
		return strings.Join(ss, ", ")
	}
	s := strings.ReplaceAll(string(in), "@REFUSED_V4@", join(v4))
	return strings.ReplaceAll(s, "@REFUSED_V6@", join(v6))
}

// words renders bytes the way nft --debug=netlink (libnftnl) does: 32-bit host-endian
// (little-endian here) words, zero-padded.
func words(b []byte, prefix string) string {
	padded := make([]byte, (len(b)+3)/4*4)
	copy(padded, b)
	var ws []string
	for i := 0; i < len(padded); i += 4 {
		ws = append(ws, fmt.Sprintf("%s%08x", prefix, binary.LittleEndian.Uint32(padded[i:])))
	}
	return strings.Join(ws, " ")
}

func elementsLine(els []nftables.SetElement) string {
	var b strings.Builder
	for _, e := range els {
		flags := 0
		if e.IntervalEnd {
			flags = 1
		}
		if v := e.VerdictData; v != nil {
			fmt.Fprintf(&b, "\telement %s  : %s -> %s %d [end]", words(e.Key, ""),
				map[expr.VerdictKind]string{expr.VerdictJump: "jump", expr.VerdictGoto: "goto"}[v.Kind], v.Chain, flags)
			continue
		}
		fmt.Fprintf(&b, "\telement %s  : %d [end]", words(e.Key, ""), flags)
	}
	return b.String()
}

var metaNames = map[expr.MetaKey]string{
	expr.MetaKeyIIFNAME: "iifname", expr.MetaKeyOIFNAME: "oifname",
	expr.MetaKeyNFPROTO: "nfproto", expr.MetaKeyL4PROTO: "l4proto",
}

var payloadBases = map[expr.PayloadBase]string{
	expr.PayloadBaseLLHeader: "link", expr.PayloadBaseNetworkHeader: "network", expr.PayloadBaseTransportHeader: "transport",
}

// renderExpr prints one expression in libnftnl's debug syntax; unknown expressions fail the
// test so that the golden comparison never silently skips one.
func renderExpr(t *testing.T, e expr.Any) string {
	switch e := e.(type) {
	case *expr.Meta:
		return fmt.Sprintf("meta load %s => reg %d", metaNames[e.Key], e.Register)
	case *expr.Cmp:
		op := map[expr.CmpOp]string{expr.CmpOpEq: "eq", expr.CmpOpNeq: "neq"}[e.Op]
		return fmt.Sprintf("cmp %s reg %d %s", op, e.Register, words(e.Data, "0x"))
	case *expr.Ct:
		key := map[expr.CtKey]string{expr.CtKeySTATE: "state", expr.CtKeySTATUS: "status"}[e.Key]
		if key == "" {
			t.Fatalf("ct key %v not rendered", e.Key)
		}
		return fmt.Sprintf("ct load %s => reg %d", key, e.Register)
	case *expr.Immediate:
		return fmt.Sprintf("immediate reg %d %s", e.Register, words(e.Data, "0x"))
	case *expr.NAT:
		if e.Type != expr.NATTypeDestNAT || e.RegAddrMax != 0 || e.RegProtoMax != 0 || e.Random || e.FullyRandom || e.Persistent || e.Prefix {
			t.Fatalf("nat %+v not rendered", e)
		}
		fam := map[uint32]string{2: "ip", 10: "ip6"}[e.Family]
		flags := 0
		if e.Specified {
			flags = 2
		}
		return fmt.Sprintf("nat dnat %s addr_min reg %d proto_min reg %d flags 0x%x", fam, e.RegAddrMin, e.RegProtoMin, flags)
	case *expr.Bitwise:
		return fmt.Sprintf("bitwise reg %d = ( reg %d & %s ) ^ %s", e.DestRegister, e.SourceRegister, words(e.Mask, "0x"), words(e.Xor, "0x"))
	case *expr.Verdict:
		v := map[expr.VerdictKind]string{expr.VerdictAccept: "accept", expr.VerdictDrop: "drop"}[e.Kind]
		return "immediate reg 0 " + v
	case *expr.Payload:
		return fmt.Sprintf("payload load %db @ %s header + %d => reg %d", e.Len, payloadBases[e.Base], e.Offset, e.DestRegister)
	case *expr.Lookup:
		if e.IsDestRegSet {
			return fmt.Sprintf("lookup reg %d set %s dreg %d", e.SourceRegister, e.SetName, e.DestRegister)
		}
		if e.Invert {
			return fmt.Sprintf("lookup reg %d set %s 0x1", e.SourceRegister, e.SetName)
		}
		return fmt.Sprintf("lookup reg %d set %s", e.SourceRegister, e.SetName)
	case *expr.Counter:
		return fmt.Sprintf("counter pkts %d bytes %d", e.Packets, e.Bytes)
	case *expr.Reject:
		return fmt.Sprintf("reject type %d code %d", e.Type, e.Code)
	case *expr.Limit:
		unit := map[expr.LimitTime]string{expr.LimitTimeSecond: "second", expr.LimitTimeMinute: "minute"}[e.Unit]
		return fmt.Sprintf("limit rate %d/%s burst %d type packets flags 0x0", e.Rate, unit, e.Burst)
	case *expr.Log:
		return fmt.Sprintf("log prefix %s level %d", e.Data, e.Level)
	}
	t.Fatalf("expression %T not rendered", e)
	return ""
}

// render prints rulesets as nft --debug=netlink prints the same batch, keeping only what
// normalizeDebug keeps: set element lines and rule blocks.
func render(t *testing.T, rss []*Ruleset) string {
	var b strings.Builder
	for _, rs := range rss {
		anon := map[uint32]Set{}
		for _, s := range rs.Sets {
			if s.Set.Anonymous {
				anon[s.Set.ID] = s
			} else if len(s.Elements) > 0 {
				b.WriteString(elementsLine(s.Elements) + "\n")
			}
		}
		for _, r := range rs.Rules {
			for _, e := range r.Exprs {
				if l, ok := e.(*expr.Lookup); ok {
					if s, ok := anon[l.SetID]; ok {
						b.WriteString(elementsLine(s.Elements) + "\n")
					}
				}
			}
			fmt.Fprintf(&b, "inet %s %s\n", r.Table.Name, r.Chain.Name)
			for _, e := range r.Exprs {
				fmt.Fprintf(&b, "  [ %s ]\n", renderExpr(t, e))
			}
		}
		for _, s := range rs.Elements {
			b.WriteString(elementsLine(s.Elements) + "\n")
		}
	}
	return b.String()
}

// normalizeDebug keeps the element lines (without nft's set userdata) and rule blocks of
// nft --debug=netlink output.
func normalizeDebug(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		switch {
		case strings.HasPrefix(line, "\telement"):
			line, _, _ = strings.Cut(line, "  userdata = ")
		case strings.HasPrefix(line, "inet brood "), strings.HasPrefix(line, "  ["):
		default:
			continue
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// TestGoldenNetlink compares the expressions and set elements brood builds with what nft
// itself sends for the same ruleset written in nft syntax (testdata/session.netlink,
// captured with nft --debug=netlink; see TestGoldenIsNftOutput).
func TestGoldenNetlink(t *testing.T) {
	want, err := os.ReadFile("testdata/session.netlink")
	if err != nil {
		t.Fatal(err)
	}
	got := render(t, goldenRulesets(t))
	if got != string(want) {
		diffLines(t, got, string(want))
	}
}

func diffLines(t *testing.T, got, want string) {
	t.Helper()
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			t.Fatalf("line %d differs:\n got: %q\nwant: %q", i+1, gl, wl)
		}
	}
}

// TestGoldenIsNftOutput re-captures nft --debug=netlink for testdata/session.nft.in in a
// throw-away netns and checks the golden file is exactly that (-update rewrites it).
func TestGoldenIsNftOutput(t *testing.T) {
	ns, _ := testNetns(t)
	f := filepath.Join(t.TempDir(), "session.nft")
	if err := os.WriteFile(f, []byte(goldenNft(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ip", "netns", "exec", ns, "nft", "--debug=netlink", "-f", f).CombinedOutput()
	if err != nil {
		t.Fatalf("nft -f: %v\n%s", err, out)
	}
	got := normalizeDebug(string(out))
	if *update {
		if err := os.WriteFile("testdata/session.netlink", []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/session.netlink")
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		diffLines(t, got, string(want))
	}
}
