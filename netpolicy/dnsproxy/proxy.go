// Package dnsproxy is brood's per-session policy DNS proxy (github.com/miekg/dns). The guest's
// only resolver, it answers names the session's egress policy allows, resolves them upstream,
// keeps only the A/AAAA/CNAME records of the queried name's CNAME chain, strips addresses in
// always-refused ranges, and pins the remaining addresses in the session's nft sets before
// it replies. Everything else is answered locally (REFUSED, FORMERR, NOTIMP) and never
// forwarded. Every answer produces one Decision for the session's egress log.
//
// Privilege: none of its own; it parses guest traffic, so broodd-helper runs it in each
// session's unprivileged, Landlock-confined egress process (package helper/egress).
package dnsproxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"brood.dev/brood/netpolicy"
)

// Pin timeout bounds: an answer's addresses are pinned for the minimum TTL of the records
// kept (CNAMEs and addresses), clamped to [DefaultMinTTL, DefaultMaxTTL]. 30 s keeps
// zero- and low-TTL answers (CDNs) usable for a connection set-up; 1 h bounds how long an
// address stays reachable after its name stopped resolving to it. Records in the reply get
// TTL min(their TTL, the pin timeout), so the guest never caches an address longer than it
// stays pinned.
const (
	DefaultMinTTL = 30 * time.Second
	DefaultMaxTTL = time.Hour
)

// DefaultUpstreamTimeout bounds one upstream exchange (UDP, then TCP on truncation).
const DefaultUpstreamTimeout = 3 * time.Second

// maxChain bounds the CNAME records followed from the question name (RFC 1034 gives no
// limit; resolvers stop after 8 to 16: Unbound 11, BIND 16). Eight covers the CDN chains
// seen in practice (two or three links); an answer with a longer chain is refused.
const maxChain = 8

// ednsSize is the UDP payload size brood advertises upstream and to the guest (the DNS
// flag day 2020 recommendation, bytes).
const ednsSize = 1232

// Policy decides names; *netpolicy.Effective implements it.
type Policy interface {
	Check(name string) (netpolicy.Grant, string, bool)
}

// Upstream resolves a query; UpstreamClient is the real implementation.
type Upstream interface {
	Exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error)
}

// Config configures a Proxy. Policy, Upstream and Pinner are required.
type Config struct {
	Policy   Policy
	Upstream Upstream
	Pinner   netpolicy.Pinner
	// Log receives one Decision per answered query (nil: discarded). It is called from
	// the serving goroutines and must be safe for concurrent use.
	Log func(Decision)
	// MinTTL and MaxTTL bound the pin timeout (zero: DefaultMinTTL, DefaultMaxTTL).
	MinTTL, MaxTTL time.Duration
	// Now returns the time for log entries (nil: time.Now).
	Now func() time.Time
}

// Proxy answers DNS queries for one session. It implements dns.Handler.
type Proxy struct {
	cfg Config
}

// New validates cfg and returns a Proxy. Errors wrap ErrConfig.
func New(cfg Config) (*Proxy, error) {
	if cfg.Policy == nil || cfg.Upstream == nil || cfg.Pinner == nil {
		return nil, fmt.Errorf("new DNS proxy: policy, upstream and pinner are required: %w", ErrConfig)
	}
	if cfg.MinTTL == 0 {
		cfg.MinTTL = DefaultMinTTL
	}
	if cfg.MaxTTL == 0 {
		cfg.MaxTTL = DefaultMaxTTL
	}
	if cfg.MinTTL < time.Second || cfg.MaxTTL < cfg.MinTTL {
		return nil, fmt.Errorf("new DNS proxy: TTL bounds [%v, %v]: %w", cfg.MinTTL, cfg.MaxTTL, ErrConfig)
	}
	if cfg.Log == nil {
		cfg.Log = func(Decision) {}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Proxy{cfg: cfg}, nil
}

// ServeDNS answers one request; UDP replies are truncated to the client's advertised size.
func (p *Proxy) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	reply := p.Handle(context.Background(), r)
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if o := r.IsEdns0(); o != nil {
			size = int(min(o.UDPSize(), ednsSize))
		}
		reply.Truncate(size)
	}
	_ = w.WriteMsg(reply) // the client went away; nothing to do
}

// Handle computes the reply to req. It forwards only a single IN A/AAAA/CNAME question for
// an allowed name, and pins the answer's addresses before returning, on the ports of the
// host entry that allowed the queried name. The policy decides on the question name alone:
// CNAME targets (a CDN's edge names) are followed, not checked, and the addresses at the
// chain's end are pinned for the question name. Every reply is logged as one Decision: malformed requests get
// FORMERR (NOTIMP for an opcode other than QUERY), names, classes and types not allowed and
// answers filter refuses get REFUSED, upstream and pin failures SERVFAIL, and an upstream
// NXDOMAIN is passed on without records.
func (p *Proxy) Handle(ctx context.Context, req *dns.Msg) *dns.Msg {
	if req.Response || req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 ||
		len(req.Answer) != 0 || len(req.Ns) != 0 {
		return p.malformed(req)
	}
	q := req.Question[0]
	reply := new(dns.Msg)
	reply.SetReply(req)
	reply.RecursionAvailable = true
	if req.IsEdns0() != nil {
		reply.SetEdns0(ednsSize, false)
	}
	d := Decision{Time: p.cfg.Now(), Name: q.Name, Type: dns.Type(q.Qtype).String()}

	grant, why, ok := p.cfg.Policy.Check(q.Name)
	if !ok {
		return p.refuse(reply, &d, why)
	}
	if why, ok := resolvable(q); !ok {
		return p.refuse(reply, &d, why)
	}
	name := strings.ToLower(dns.Fqdn(q.Name))
	resp, why := p.resolve(ctx, q, name)
	if resp == nil {
		return p.fail(reply, &d, why)
	}
	switch resp.Rcode {
	case dns.RcodeSuccess:
	case dns.RcodeNameError:
		reply.Rcode = dns.RcodeNameError
		d.Verdict, d.Reason = Allowed, "NXDOMAIN"
		d.Dropped = len(resp.Answer) + len(resp.Ns) + len(resp.Extra)
		p.cfg.Log(d)
		return reply
	default:
		return p.fail(reply, &d, "upstream rcode "+dns.RcodeToString[resp.Rcode])
	}

	kept, addrs, err := p.filter(q, name, resp, &d)
	if err != nil {
		return p.refuse(reply, &d, err.Error())
	}
	if err := p.pin(ctx, grant, kept, addrs, &d); err != nil {
		return p.fail(reply, &d, "pin: "+err.Error())
	}
	reply.Answer = kept
	d.Verdict, d.Reason = Allowed, grant.Source.String()
	p.cfg.Log(d)
	return reply
}

// malformed returns the reply to a request Handle does not accept (a response, an opcode
// other than QUERY, not exactly one question, or records in the answer or authority
// section): FORMERR, or NOTIMP for another opcode, with every section empty. It logs the
// refusal as "malformed request".
func (p *Proxy) malformed(req *dns.Msg) *dns.Msg {
	reply := new(dns.Msg)
	reply.SetRcodeFormatError(req)
	if req.Opcode != dns.OpcodeQuery {
		reply.Rcode = dns.RcodeNotImplemented
	}
	reply.Question, reply.Answer, reply.Ns, reply.Extra = nil, nil, nil, nil
	p.cfg.Log(Decision{Time: p.cfg.Now(), Verdict: Refused, Reason: "malformed request"})
	return reply
}

// refuse turns reply into REFUSED with no answer and logs d as Refused for reason.
func (p *Proxy) refuse(reply *dns.Msg, d *Decision, reason string) *dns.Msg {
	reply.Rcode = dns.RcodeRefused
	reply.Answer = nil
	d.Verdict, d.Reason = Refused, reason
	p.cfg.Log(*d)
	return reply
}

// fail turns reply into SERVFAIL with no answer and logs d as Failed for reason, with
// nothing pinned.
func (p *Proxy) fail(reply *dns.Msg, d *Decision, reason string) *dns.Msg {
	reply.Rcode = dns.RcodeServerFailure
	reply.Answer = nil
	d.Verdict, d.Reason, d.Pinned, d.Ports, d.Timeout = Failed, reason, nil, nil, 0
	p.cfg.Log(*d)
	return reply
}

// resolvable reports whether Handle forwards a question of q's class and type: class IN,
// type A, AAAA or CNAME. Otherwise it returns the refusal's reason.
func resolvable(q dns.Question) (reason string, ok bool) {
	if q.Qclass != dns.ClassINET {
		return "class " + dns.Class(q.Qclass).String() + " not resolved", false
	}
	if q.Qtype != dns.TypeA && q.Qtype != dns.TypeAAAA && q.Qtype != dns.TypeCNAME {
		return "type " + dns.Type(q.Qtype).String() + " not resolved", false
	}
	return "", true
}

// resolve asks the upstream for name (the question's name, lower-cased and fully
// qualified) with q's type, class IN, EDNS0 with ednsSize. It returns the upstream's
// response, or nil and the failure's reason: the exchange's error, or a response whose
// question is not the one asked.
func (p *Proxy) resolve(ctx context.Context, q dns.Question, name string) (*dns.Msg, string) {
	up := new(dns.Msg)
	up.SetQuestion(name, q.Qtype)
	up.SetEdns0(ednsSize, false)
	resp, err := p.cfg.Upstream.Exchange(ctx, up)
	if err != nil {
		return nil, err.Error()
	}
	if len(resp.Question) != 1 || !strings.EqualFold(resp.Question[0].Name, name) ||
		resp.Question[0].Qtype != q.Qtype || resp.Question[0].Qclass != dns.ClassINET {
		return nil, "upstream answered another question"
	}
	return resp, ""
}

// pin pins addrs (when there are any) on the ports of grant's host entry for the pin
// timeout: the minimum TTL of the kept records, clamped to [MinTTL, MaxTTL]. It records
// the pins in d and lowers every kept record's TTL to the timeout, so the guest does not
// cache an address longer than it stays pinned. It returns the Pinner's error, with the
// records unchanged.
func (p *Proxy) pin(ctx context.Context, grant netpolicy.Grant, kept []dns.RR, addrs []netip.Addr, d *Decision) error {
	minTTL := uint32(p.cfg.MaxTTL / time.Second)
	for _, rr := range kept {
		minTTL = min(minTTL, rr.Header().Ttl)
	}
	timeout := max(time.Duration(minTTL)*time.Second, p.cfg.MinTTL)
	if len(addrs) > 0 {
		ports := grant.Entry.EffectivePorts()
		if err := p.cfg.Pinner.Pin(ctx, addrs, ports, timeout); err != nil {
			return err
		}
		d.Pinned, d.Ports, d.Timeout = addrs, ports, Seconds(timeout)
	}
	limit := uint32(timeout / time.Second)
	for _, rr := range kept {
		rr.Header().Ttl = min(rr.Header().Ttl, limit)
	}
	return nil
}

// filter walks the CNAME chain from name through resp's answer section and returns the chain's CNAME records followed by the chain
// end's address records of the queried type, minus addresses in refused ranges. Records of
// any other owner or type are dropped and counted in d. An error (a loop, a chain of more
// than maxChain CNAMEs) refuses the whole answer.
func (p *Proxy) filter(q dns.Question, name string, resp *dns.Msg, d *Decision) ([]dns.RR, []netip.Addr, error) {
	kept, used, cur, err := chain(q, name, resp, d)
	if err != nil {
		return nil, nil, err
	}
	var addrs []netip.Addr
	for i, rr := range resp.Answer {
		if used[i] {
			continue
		}
		h := rr.Header()
		if h.Rrtype != q.Qtype || h.Class != dns.ClassINET || !strings.EqualFold(h.Name, cur) {
			d.Dropped++
			continue
		}
		a, ok := rrAddr(rr)
		if !ok {
			d.Dropped++
			continue
		}
		if why, bad := netpolicy.RefusedReason(a); bad {
			d.Stripped = append(d.Stripped, Stripped{a, why})
			continue
		}
		owner := cur
		if len(kept) == 0 {
			owner = q.Name
		}
		kept = append(kept, addrRR(owner, h.Ttl, a))
		addrs = append(addrs, a)
	}
	d.Dropped += len(resp.Ns) + len(resp.Extra)
	if o := resp.IsEdns0(); o != nil {
		d.Dropped-- // our own EDNS0 echo, not a record
	}
	return kept, addrs, nil
}

// chain follows the CNAME chain from name through resp's answer section (IN CNAME records
// whose owner matches, case-insensitively, each used once), at most maxChain of them. A
// target is not checked against the policy (the question name was), but must appear only
// once. It returns the chain as fresh CNAME
// records with lower-cased owners and targets (the first one's owner spelt as in the
// question), which answer records the chain used, and the chain's end (name when there
// is no CNAME); it appends each target to d.Chain. The error names a loop or an overlong
// chain.
func chain(q dns.Question, name string, resp *dns.Msg, d *Decision) (kept []dns.RR, used []bool, cur string, err error) {
	used = make([]bool, len(resp.Answer))
	cur = name
	seen := map[string]bool{cur: true}
	for step := 0; ; step++ {
		next := -1
		for i, rr := range resp.Answer {
			if c, ok := rr.(*dns.CNAME); ok && !used[i] && strings.EqualFold(c.Hdr.Name, cur) && c.Hdr.Class == dns.ClassINET {
				next = i
				break
			}
		}
		if next < 0 {
			break
		}
		if step == maxChain {
			return nil, nil, "", fmt.Errorf("CNAME chain longer than %d", maxChain)
		}
		c := resp.Answer[next].(*dns.CNAME)
		used[next] = true
		target := strings.ToLower(c.Target)
		if seen[target] {
			return nil, nil, "", fmt.Errorf("CNAME loop at %s", target)
		}
		seen[target] = true
		d.Chain = append(d.Chain, target)
		kept = append(kept, &dns.CNAME{Hdr: dns.RR_Header{Name: cur, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: c.Hdr.Ttl}, Target: target})
		cur = target
	}
	if len(kept) > 0 {
		kept[0].Header().Name = q.Name // echo the question's spelling
	}
	return kept, used, cur, nil
}

// rrAddr returns the address of an A record (4 bytes) or an AAAA record (16 bytes); ok is
// false for any other record and for an address of the wrong length.
func rrAddr(rr dns.RR) (a netip.Addr, ok bool) {
	switch r := rr.(type) {
	case *dns.A:
		a, ok = netip.AddrFromSlice(r.A.To4())
	case *dns.AAAA:
		if len(r.AAAA) == net.IPv6len {
			a, ok = netip.AddrFromSlice(r.AAAA)
		}
	}
	return a, ok
}

// addrRR returns a fresh IN A (for an IPv4 a) or AAAA record for owner with ttl seconds.
func addrRR(owner string, ttl uint32, a netip.Addr) dns.RR {
	if a.Is4() {
		return &dns.A{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: net.IP(a.AsSlice())}
	}
	return &dns.AAAA{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: net.IP(a.AsSlice())}
}
