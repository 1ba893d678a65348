package dnsproxy

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"brood.dev/brood/netpolicy"
)

// cannedUpstream answers every question with the same answer section, in the given order.
type cannedUpstream struct{ answer []dns.RR }

func (c cannedUpstream) Exchange(_ context.Context, m *dns.Msg) (*dns.Msg, error) {
	r := new(dns.Msg)
	r.SetReply(m)
	for _, rr := range c.answer {
		r.Answer = append(r.Answer, dns.Copy(rr))
	}
	return r, nil
}

func mustRRs(t *testing.T, recs ...string) []dns.RR {
	t.Helper()
	var out []dns.RR
	for _, s := range recs {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rr)
	}
	return out
}

// chainRecords returns the records of a chain of n CNAMEs from api.allowed.test through
// edge1..edgeN.cdn.test (names no policy allows), ending in A 192.0.2.100 for the last.
func chainRecords(n int) []string {
	var recs []string
	prev := "api.allowed.test."
	for i := 1; i <= n; i++ {
		next := fmt.Sprintf("edge%d.cdn.test.", i)
		recs = append(recs, fmt.Sprintf("%s 60 IN CNAME %s", prev, next))
		prev = next
	}
	return append(recs, prev+" 60 IN A 192.0.2.100")
}

// askCanned runs one A question for name through a proxy whose upstream answers recs
// (shuffled by reversing them, so the chain is not in order), and returns the reply, the
// pins and the decision.
func askCanned(t *testing.T, name string, recs []dns.RR) (*dns.Msg, []netpolicy.Pin, Decision) {
	t.Helper()
	pins := &netpolicy.RecordingPinner{}
	var d Decision
	p, err := New(Config{Policy: testPolicy(t), Upstream: cannedUpstream{recs}, Pinner: pins,
		Log: func(x Decision) { d = x }})
	if err != nil {
		t.Fatal(err)
	}
	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeA)
	return p.Handle(context.Background(), q), pins.Pins(), d
}

// TestCNAMEChainLengths: an allowed question name whose chain runs through 1..maxChain
// names no policy allows is answered and its end's address pinned for the question name;
// maxChain+1 CNAMEs are refused with nothing pinned.
func TestCNAMEChainLengths(t *testing.T) {
	if maxChain != 8 {
		t.Fatalf("maxChain = %d; the documented cap is 8", maxChain)
	}
	want := netip.MustParseAddr("192.0.2.100")
	for n := 1; n <= maxChain+1; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			recs := mustRRs(t, chainRecords(n)...)
			slices.Reverse(recs)
			r, pins, d := askCanned(t, "API.allowed.test.", recs)
			if n > maxChain {
				if r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 || len(pins) != 0 {
					t.Fatalf("chain of %d: rcode %s, %d records, pins %v; want REFUSED, nothing pinned",
						n, dns.RcodeToString[r.Rcode], len(r.Answer), pins)
				}
				if !strings.Contains(d.Reason, "longer than 8") {
					t.Errorf("reason %q does not state the cap", d.Reason)
				}
				return
			}
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != n+1 {
				t.Fatalf("chain of %d: rcode %s, answer %v", n, dns.RcodeToString[r.Rcode], r.Answer)
			}
			if r.Answer[0].Header().Name != "API.allowed.test." {
				t.Errorf("first record's owner %q; want the question's spelling", r.Answer[0].Header().Name)
			}
			if len(pins) != 1 || !slices.Equal(pins[0].Addrs, []netip.Addr{want}) {
				t.Errorf("pins = %v; want [%v]", pins, want)
			}
			if d.Verdict != Allowed || d.Name != "API.allowed.test." || len(d.Chain) != n ||
				!slices.Equal(d.Pinned, []netip.Addr{want}) {
				t.Errorf("decision = %+v; want allowed, pinned for the question name, chain of %d", d, n)
			}
		})
	}
}

// TestCNAMELoops: a chain that comes back to a name it passed (itself, the question name,
// a later link) is refused with nothing pinned.
func TestCNAMELoops(t *testing.T) {
	for name, recs := range map[string][]string{
		"self":     {"api.allowed.test. 60 IN CNAME api.allowed.test.", "api.allowed.test. 60 IN A 192.0.2.1"},
		"question": {"api.allowed.test. 60 IN CNAME a.cdn.test.", "a.cdn.test. 60 IN CNAME API.allowed.test.", "a.cdn.test. 60 IN A 192.0.2.1"},
		"inner": {"api.allowed.test. 60 IN CNAME a.cdn.test.", "a.cdn.test. 60 IN CNAME b.cdn.test.",
			"b.cdn.test. 60 IN CNAME a.cdn.test.", "b.cdn.test. 60 IN A 192.0.2.1"},
	} {
		t.Run(name, func(t *testing.T) {
			r, pins, d := askCanned(t, "api.allowed.test.", mustRRs(t, recs...))
			if r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 || len(pins) != 0 || !strings.Contains(d.Reason, "loop") {
				t.Errorf("rcode %s, answer %v, pins %v, reason %q; want REFUSED for a loop, nothing pinned",
					dns.RcodeToString[r.Rcode], r.Answer, pins, d.Reason)
			}
		})
	}
}

// TestCNAMEMixedAnswer: an answer that mixes in records for other names (an A for a name
// off the chain, a second CNAME branch, an A for an intermediate link, an allowed
// name's A) passes on and pins only the chain end's addresses.
func TestCNAMEMixedAnswer(t *testing.T) {
	recs := mustRRs(t,
		"github.com. 60 IN A 192.0.2.50",              // allowed, but not asked
		"evil.test. 60 IN A 192.0.2.51",               // unrelated
		"api.allowed.test. 60 IN CNAME a.cdn.test.",   // chain link 1
		"a.cdn.test. 60 IN A 192.0.2.52",              // address of an intermediate link
		"a.cdn.test. 60 IN CNAME b.cdn.test.",         // chain link 2
		"other.allowed.test. 60 IN CNAME b.cdn.test.", // another name's branch
		"b.cdn.test. 60 IN A 192.0.2.53",              // chain end
		"b.cdn.test. 60 IN AAAA 2001:db8::53",         // chain end, other type
		"b.cdn.test. 60 IN A 10.1.2.3",                // chain end, refused range
	)
	r, pins, d := askCanned(t, "api.allowed.test.", recs)
	want := []netip.Addr{netip.MustParseAddr("192.0.2.53")}
	if r.Rcode != dns.RcodeSuccess || !slices.Equal(answerAddrs(r), want) || len(r.Answer) != 3 {
		t.Fatalf("rcode %s, answer %v; want the two CNAMEs and 192.0.2.53", dns.RcodeToString[r.Rcode], r.Answer)
	}
	if len(pins) != 1 || !slices.Equal(pins[0].Addrs, want) {
		t.Errorf("pins = %v; want only %v", pins, want)
	}
	if d.Dropped != 5 || len(d.Stripped) != 1 || !slices.Equal(d.Chain, []string{"a.cdn.test.", "b.cdn.test."}) {
		t.Errorf("decision = %+v; want 5 records dropped, 10.1.2.3 stripped, chain a, b", d)
	}
}
