package egress

import (
	"fmt"
	"net"
	"strconv"

	"brood.dev/brood/netpolicy"
)

// DNSPort is where each session's DNS proxy listens on the tap's host addresses (UDP and
// classic TCP): the guest's resolv.conf names the host address, whose port is fixed at 53
// (RFC 1035 4.2).
const DNSPort = 53

// IPv6ConfDir is the IPv6 per-interface sysctl directory of the helper's network namespace
// (IPv6Conf; the helper's Landlock rule in its ConfinementRules).
const IPv6ConfDir = "/proc/sys/net/ipv6/conf"

// Config is the `[egress]` table of helper.toml.
type Config struct {
	// PolicyPath is the system egress policy (default netpolicy.SystemPolicyPath,
	// /etc/brood/policy.toml); a missing file means no system policy, an unreadable,
	// insecure or malformed one refuses every session with a network.
	PolicyPath string `toml:"policy_path"`
	// PoolV4 and PoolV6 are the prefixes sessions' /30 and /126 are carved from (default
	// 10.213.0.0/16 and fd62:726f:6f64::/64). They must not overlap any other network of
	// the host.
	PoolV4 string `toml:"pool_v4"`
	PoolV6 string `toml:"pool_v6"`
	// Upstream is the resolver the DNS proxies ask ("host:port"); empty: the first
	// nameserver of /etc/resolv.conf.
	Upstream string `toml:"upstream"`
	// Uplinks name the interfaces guests' traffic leaves by (forwarding is enabled on them
	// and on each tap, never globally); empty: the interfaces of the default routes.
	Uplinks []string `toml:"uplinks"`
	// Agents maps an agent name to its LLM provider hosts ("NAME" or "NAME:443/tcp"
	// forms of --allow-host), replacing the built-in entry of that name.
	Agents map[string][]string `toml:"agents"`
}

// DefaultConfig returns the built-in egress configuration.
func DefaultConfig() Config {
	return Config{
		PolicyPath: netpolicy.SystemPolicyPath,
		PoolV4:     "10.213.0.0/16",
		PoolV6:     "fd62:726f:6f64::/64",
	}
}

func (c *Config) Validate() error {
	if c.PolicyPath == "" || c.PolicyPath[0] != '/' {
		return fmt.Errorf("egress.policy_path %q is not absolute", c.PolicyPath)
	}
	if _, err := newAddrPool(c.PoolV4, c.PoolV6); err != nil {
		return err
	}
	for name, hosts := range c.Agents {
		es, err := parseEntries(hosts)
		if err != nil {
			return fmt.Errorf("egress.agents.%s: %w", name, err)
		}
		for _, e := range es {
			if err := netpolicy.CheckGrant(e, netpolicy.Source{Layer: netpolicy.LayerAgent, Detail: name}); err != nil {
				return fmt.Errorf("egress.agents.%s: %w", name, err)
			}
		}
	}
	return nil
}

func parseEntries(ss []string) ([]netpolicy.Entry, error) {
	out := make([]netpolicy.Entry, 0, len(ss))
	for _, s := range ss {
		e, err := netpolicy.ParseAllowHostFlag(s)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// AgentHosts returns the provider hosts of agent from the config, else netpolicy's
// built-in table; an unknown agent has none (locked then allows nothing).
func (c *Config) AgentHosts(agent string) ([]netpolicy.Entry, error) {
	hosts, ok := c.Agents[agent]
	if !ok {
		hosts, _ = netpolicy.BuiltinAgentHosts(agent)
	}
	return parseEntries(hosts)
}

// UpstreamTCPPort is the TCP port of the configured upstream resolver ("host:port"), or
// 53 (DNS, RFC 1035) for resolv.conf nameservers and unparsable values.
func UpstreamTCPPort(up string) uint16 {
	if _, p, err := net.SplitHostPort(up); err == nil {
		if n, err := strconv.ParseUint(p, 10, 16); err == nil && n > 0 {
			return uint16(n)
		}
	}
	return DNSPort
}
