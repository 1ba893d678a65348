package dnsproxy

import (
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/miekg/dns"
)

// FakeUpstream is an authoritative-looking resolver for tests: it answers from Zone, follows
// CNAMEs within it, appends Junk to every answer, and logs every question it receives.
type FakeUpstream struct {
	mu      sync.Mutex
	zone    []dns.RR
	junk    []dns.RR
	queries []dns.Question
}

// NewFakeUpstream parses zone records in presentation format ("a.example. 60 IN A 192.0.2.1");
// junk records are appended to the answer section of every reply.
func NewFakeUpstream(zone []string, junk ...string) (*FakeUpstream, error) {
	f := &FakeUpstream{}
	for _, list := range []struct {
		src []string
		dst *[]dns.RR
	}{{zone, &f.zone}, {junk, &f.junk}} {
		for _, s := range list.src {
			rr, err := dns.NewRR(s)
			if err != nil {
				return nil, fmt.Errorf("parse fake zone record %q: %w", s, err)
			}
			*list.dst = append(*list.dst, rr)
		}
	}
	return f, nil
}

// Add parses zone records as NewFakeUpstream does and adds them to the zone (a test's own
// names on a shared fake); on a parse error nothing is added.
func (f *FakeUpstream) Add(zone ...string) error {
	g, err := NewFakeUpstream(zone)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.zone = append(f.zone, g.zone...)
	return nil
}

// ServeDNS logs the question and answers it: NXDOMAIN when no record of the name exists.
func (f *FakeUpstream) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	f.mu.Lock()
	f.queries = append(f.queries, r.Question...)
	if len(r.Question) == 1 {
		q := r.Question[0]
		cur := q.Name
		exists := false
		for range 32 {
			next := ""
			for _, rr := range f.zone {
				h := rr.Header()
				if !strings.EqualFold(h.Name, cur) {
					continue
				}
				exists = true
				if c, ok := rr.(*dns.CNAME); ok && q.Qtype != dns.TypeCNAME {
					m.Answer = append(m.Answer, dns.Copy(rr))
					next = c.Target
				} else if h.Rrtype == q.Qtype || q.Qtype == dns.TypeANY {
					m.Answer = append(m.Answer, dns.Copy(rr))
				}
			}
			if next == "" {
				break
			}
			cur = next
		}
		if !exists {
			m.Rcode = dns.RcodeNameError
		}
		for _, rr := range f.junk {
			m.Answer = append(m.Answer, dns.Copy(rr))
		}
	}
	f.mu.Unlock()
	size := dns.MinMsgSize
	if o := r.IsEdns0(); o != nil {
		m.SetEdns0(o.UDPSize(), false)
		size = int(o.UDPSize())
	}
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		m.Truncate(size)
	}
	_ = w.WriteMsg(m)
}

// Queries returns every question received so far.
func (f *FakeUpstream) Queries() []dns.Question {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]dns.Question(nil), f.queries...)
}

// Asked reports whether any question named name (case-insensitive, with or without the
// trailing dot) or a name below it was received.
func (f *FakeUpstream) Asked(name string) bool {
	name = strings.ToLower(dns.Fqdn(name))
	for _, q := range f.Queries() {
		n := strings.ToLower(q.Name)
		if n == name || strings.HasSuffix(n, "."+name) {
			return true
		}
	}
	return false
}

// ResetQueries clears the query log.
func (f *FakeUpstream) ResetQueries() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = nil
}
