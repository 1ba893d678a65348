package dnsproxy

import (
	"context"
	"fmt"
	"net"

	"github.com/miekg/dns"
)

// UpstreamClient asks one upstream resolver over UDP and retries over TCP when the answer is
// truncated.
type UpstreamClient struct {
	// Addr is "host:port" of the resolver (from the host's resolv.conf or the helper config).
	Addr string
	udp  *dns.Client
	tcp  *dns.Client
}

// NewUpstream returns a client for the resolver at addr ("host:port"), each exchange bounded
// by DefaultUpstreamTimeout.
func NewUpstream(addr string) *UpstreamClient {
	return &UpstreamClient{
		Addr: addr,
		udp:  &dns.Client{Net: "udp", Timeout: DefaultUpstreamTimeout, UDPSize: ednsSize},
		tcp:  &dns.Client{Net: "tcp", Timeout: DefaultUpstreamTimeout},
	}
}

var _ Upstream = (*UpstreamClient)(nil)

// Exchange sends m and returns the answer. Errors wrap ErrUpstream.
func (u *UpstreamClient) Exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	r, _, err := u.udp.ExchangeContext(ctx, m, u.Addr)
	if err == nil && r.Truncated {
		r, _, err = u.tcp.ExchangeContext(ctx, m, u.Addr)
	}
	if err != nil {
		return nil, fmt.Errorf("ask upstream %s: %v: %w", u.Addr, err, ErrUpstream)
	}
	return r, nil
}

// UpstreamFromResolvConf returns "host:port" of the first nameserver in the resolv.conf at
// path (normally /etc/resolv.conf, read by the helper in the host's netns: a systemd-resolved
// stub at 127.0.0.53 is fine). Errors wrap ErrConfig when there is none.
func UpstreamFromResolvConf(path string) (string, error) {
	cfg, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return "", fmt.Errorf("read resolver config %q: %w", path, err)
	}
	if len(cfg.Servers) == 0 {
		return "", fmt.Errorf("resolver config %q: no nameserver: %w", path, ErrConfig)
	}
	return net.JoinHostPort(cfg.Servers[0], cfg.Port), nil
}
