package egress

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"brood.dev/brood/internal/testenv"
)

const tapOnlyNetnsEnv = "BROOD_TAPONLY_NETNS"

// TestEgressProxyTapOnly: a session's DNS proxy answers only what enters by its own tap.
// Over IPv4 and IPv6, UDP and TCP, the guest behind the tap is answered; a local process
// of the helper's host (its netns, as any local uid would be), the other session's guest
// and a machine on the uplink's LAN (routes to the pool via the host) get no answer.
func TestEgressProxyTapOnly(t *testing.T) {
	if v := os.Getenv(tapOnlyNetnsEnv); v != "" {
		tapOnlyScenario(t, strings.Split(v, ","))
		return
	}
	names := newEgressBed(t)
	host, inet := names[0], names[1]
	// The LAN side of the uplink routes the pools to the host, IPv6 included.
	testenv.IP(t, "-n", host, "addr", "add", "fd00:2::1/64", "dev", "up0", "nodad")
	testenv.IP(t, "-n", inet, "addr", "add", "fd00:2::2/64", "dev", "up0", "nodad")
	testenv.IP(t, "-n", inet, "route", "add", DefaultConfig().PoolV4, "via", "172.31.255.1")
	testenv.IP(t, "-n", inet, "-6", "route", "add", DefaultConfig().PoolV6, "via", "fd00:2::1")
	runInHost(t, "TestEgressProxyTapOnly", tapOnlyNetnsEnv, names)
}

func tapOnlyScenario(t *testing.T, names []string) {
	e := startBedManager(t, names)
	sa := startLocked(t, e, "aaaa0001")
	sb := startLocked(t, e, "bbbb0002")
	inet, g1, g2 := names[1], names[2], names[3]
	waitAnswered(t, g1, net.JoinHostPort(sa.Addrs.Host4.String(), "53"))
	waitAnswered(t, g2, net.JoinHostPort(sb.Addrs.Host4.String(), "53"))
	for _, fam := range []struct {
		name string
		addr string
	}{{"v4", net.JoinHostPort(sa.Addrs.Host4.String(), "53")}, {"v6", net.JoinHostPort(sa.Addrs.Host6.String(), "53")}} {
		for _, network := range []string{"udp", "tcp"} {
			if r, err := queryIn(g1, network, fam.addr, "ok.pkg.test.", dns.TypeA); err != nil || r.Rcode != dns.RcodeSuccess {
				t.Errorf("%s %s: own guest's query = %v, %v; want an answer", fam.name, network, r, err)
			}
			for _, from := range []struct{ who, ns string }{{"local process", ""}, {"other session's guest", g2}, {"uplink LAN", inet}} {
				var r *dns.Msg
				var err error
				if from.ns == "" {
					r, err = queryHere(network, fam.addr)
				} else {
					r, err = queryIn(from.ns, network, fam.addr, "ok.pkg.test.", dns.TypeA)
				}
				if err == nil {
					t.Errorf("%s %s: %s got an answer from session A's proxy: %v", fam.name, network, from.who, r)
				}
			}
		}
	}
}

// queryHere queries server from the calling process's own netns.
func queryHere(network, server string) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion("ok.pkg.test.", dns.TypeA)
	r, _, err := (&dns.Client{Net: network, Timeout: 2 * time.Second}).Exchange(m, server)
	return r, err
}
