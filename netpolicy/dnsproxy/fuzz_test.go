package dnsproxy

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"brood.dev/brood/netpolicy"
)

// fuzzUpstream answers with a fixed (fuzzed) message, optionally echoing the question so
// that the answer filtering is reached.
type fuzzUpstream struct {
	resp  *dns.Msg
	echo  bool
	calls int
}

func (f *fuzzUpstream) Exchange(_ context.Context, m *dns.Msg) (*dns.Msg, error) {
	f.calls++
	if f.resp == nil {
		return nil, errors.New("no answer")
	}
	r := f.resp.Copy()
	if f.echo {
		r.Question = m.Question
	}
	return r, nil
}

func packed(t testing.TB, m *dns.Msg) []byte {
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzHandle feeds arbitrary requests and upstream answers through the proxy and checks its
// invariants: refused names and types never reach the upstream; the reply's addresses are
// exactly the pinned ones, none in a refused range; every reply record belongs to the
// question's CNAME chain (checkChain); the reply packs.
func FuzzHandle(f *testing.F) {
	q := func(name string, t uint16) *dns.Msg { m := new(dns.Msg); m.SetQuestion(name, t); return m }
	ans := func(rrs ...string) *dns.Msg {
		m := new(dns.Msg)
		m.Response = true
		for _, s := range rrs {
			rr, err := dns.NewRR(s)
			if err != nil {
				panic(err)
			}
			m.Answer = append(m.Answer, rr)
		}
		return m
	}
	f.Add(packed(f, q("github.com.", dns.TypeA)), packed(f, ans("github.com. 60 IN A 192.0.2.1", "x.test. 1 IN A 192.0.2.2")), true)
	f.Add(packed(f, q("www.allowed.test.", dns.TypeA)), packed(f, ans("www.allowed.test. 5 IN CNAME a.allowed.test.", "a.allowed.test. 9 IN A 127.0.0.1", "a.allowed.test. 9 IN A 192.0.2.3")), true)
	f.Add(packed(f, q("x.allowed.test.", dns.TypeAAAA)), packed(f, ans("x.allowed.test. 5 IN AAAA 64:ff9b::a9fe:a9fe", "x.allowed.test. 5 IN AAAA 2001:db8::1")), true)
	f.Add(packed(f, q("evil.test.", dns.TypeTXT)), packed(f, ans("evil.test. 60 IN TXT \"x\"")), false)
	f.Add(packed(f, q("a.allowed.test.", dns.TypeA)), packed(f, ans("a.allowed.test. 5 IN CNAME b.other.test.", "b.other.test. 9 IN A 192.0.2.4")), true)

	policy := testPolicy(f)
	f.Fuzz(func(t *testing.T, reqBytes, respBytes []byte, echo bool) {
		req := new(dns.Msg)
		if err := req.Unpack(reqBytes); err != nil {
			return
		}
		up := &fuzzUpstream{echo: echo}
		if resp := new(dns.Msg); resp.Unpack(respBytes) == nil {
			up.resp = resp
		}
		pins := &netpolicy.RecordingPinner{}
		p, err := New(Config{Policy: policy, Upstream: up, Pinner: pins})
		if err != nil {
			t.Fatal(err)
		}
		reply := p.Handle(context.Background(), req)
		if _, err := reply.Pack(); err != nil {
			t.Fatalf("reply does not pack: %v\n%v", err, reply)
		}
		if reply.Id != req.Id {
			t.Fatalf("reply id %d, request id %d", reply.Id, req.Id)
		}
		single := len(req.Question) == 1
		allowed := single && policy.Allowed(req.Question[0].Name) && req.Question[0].Qclass == dns.ClassINET &&
			(req.Question[0].Qtype == dns.TypeA || req.Question[0].Qtype == dns.TypeAAAA || req.Question[0].Qtype == dns.TypeCNAME)
		if !allowed && up.calls > 0 {
			t.Fatalf("request %v was forwarded", req.Question)
		}
		var pinned []netip.Addr
		for _, pin := range pins.Pins() {
			if pin.Timeout < DefaultMinTTL || pin.Timeout > DefaultMaxTTL {
				t.Fatalf("pin timeout %v outside bounds", pin.Timeout)
			}
			pinned = append(pinned, pin.Addrs...)
		}
		got := answerAddrs(reply)
		if len(got) != len(pinned) {
			t.Fatalf("reply addresses %v, pinned %v", got, pinned)
		}
		for i, a := range got {
			if a != pinned[i] {
				t.Fatalf("reply addresses %v, pinned %v", got, pinned)
			}
			if why, bad := netpolicy.RefusedReason(a); bad {
				t.Fatalf("refused address %v (%s) answered", a, why)
			}
		}
		if len(reply.Ns) != 0 {
			t.Fatalf("authority records passed on: %v", reply.Ns)
		}
		if len(reply.Answer) > 0 && !allowed {
			t.Fatalf("records answered for a refused question: %v", reply.Answer)
		}
		checkChain(t, req, reply)
	})
}

// checkChain fails t unless reply's answer is the question's CNAME chain: the first
// record is owned by the question name, each next one by the previous CNAME's target, at
// most maxChain CNAMEs, the addresses only at the end, every TTL within the pin bound.
func checkChain(t *testing.T, req, reply *dns.Msg) {
	t.Helper()
	if len(reply.Answer) == 0 {
		return
	}
	owner, cnames := req.Question[0].Name, 0
	for _, rr := range reply.Answer {
		if !strings.EqualFold(rr.Header().Name, owner) {
			t.Fatalf("record off the chain (owner %q expected) passed on: %v", owner, rr)
		}
		if rr.Header().Ttl > uint32(DefaultMaxTTL.Seconds()) {
			t.Fatalf("TTL above the pin bound: %v", rr)
		}
		if c, ok := rr.(*dns.CNAME); ok {
			cnames++
			owner = c.Target
		}
	}
	if cnames > maxChain {
		t.Fatalf("chain of %d CNAMEs passed on", cnames)
	}
}
