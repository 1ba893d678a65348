package helper

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"sync"
	"unicode"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
)

// DNSPort is where each session's DNS proxy listens on the tap's host addresses (UDP and
// classic TCP): the guest's resolv.conf names the host address, whose port is fixed at 53
// (RFC 1035 4.2).
const DNSPort = 53

// ipv6ConfDir is the IPv6 per-interface sysctl directory of the helper's network namespace
// (IPv6Conf; the Landlock rule in ConfinementRules).
const ipv6ConfDir = "/proc/sys/net/ipv6/conf"

// EgressConfig is the `[egress]` table of helper.toml.
type EgressConfig struct {
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

// DefaultEgressConfig returns the built-in egress configuration.
func DefaultEgressConfig() EgressConfig {
	return EgressConfig{
		PolicyPath: netpolicy.SystemPolicyPath,
		PoolV4:     "10.213.0.0/16",
		PoolV6:     "fd62:726f:6f64::/64",
	}
}

func (c *EgressConfig) validate() error {
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

// agentHosts returns the provider hosts of agent from the config, else netpolicy's
// built-in table; an unknown agent has none (locked then allows nothing).
func (c *EgressConfig) agentHosts(agent string) ([]netpolicy.Entry, error) {
	hosts, ok := c.Agents[agent]
	if !ok {
		hosts, _ = netpolicy.BuiltinAgentHosts(agent)
	}
	return parseEntries(hosts)
}

// addrPool hands out slot i of the pools: the IPv4 /30 PoolV4+4i (host .1, guest .2)
// and the IPv6 /126 PoolV6+4i (host ::1, guest ::2). Slots are reused once released.
type addrPool struct {
	v4, v6 netip.Prefix
	slots  int // number of slots: the smaller pool's count of /30 or /126, at most 65536

	mu   sync.Mutex
	used map[int]bool
}

// maxSlots bounds the pool (more sessions than this on one host are not meaningful).
const maxSlots = 1 << 16

func newAddrPool(v4, v6 string) (*addrPool, error) {
	p4, err := netip.ParsePrefix(v4)
	if err != nil || !p4.Addr().Is4() || p4.Bits() > 30 || p4.Masked() != p4 {
		return nil, fmt.Errorf("egress.pool_v4 %q is not an IPv4 network of /30 or larger: %w", v4, ErrConfig)
	}
	p6, err := netip.ParsePrefix(v6)
	if err != nil || !p6.Addr().Is6() || p6.Addr().Is4In6() || p6.Bits() > 126 || p6.Masked() != p6 {
		return nil, fmt.Errorf("egress.pool_v6 %q is not an IPv6 network of /126 or larger: %w", v6, ErrConfig)
	}
	n := min(1<<min(30-p4.Bits(), 16), 1<<min(126-p6.Bits(), 16), maxSlots)
	return &addrPool{v4: p4, v6: p6, slots: n, used: map[int]bool{}}, nil
}

// slotAddrs are the addresses of one session's link.
type slotAddrs struct {
	Host4, Guest4 netip.Addr // .1 and .2 of the /30
	Host6, Guest6 netip.Addr // ::1 and ::2 of the /126
	Net4, Net6    netip.Prefix
}

func (p *addrPool) addrs(slot int) slotAddrs {
	b4 := p.v4.Addr().As4()
	v := uint32(b4[0])<<24 | uint32(b4[1])<<16 | uint32(b4[2])<<8 | uint32(b4[3])
	v += uint32(slot) * 4
	at4 := func(off uint32) netip.Addr {
		x := v + off
		return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)})
	}
	b6 := p.v6.Addr().As16()
	at6 := func(off uint32) netip.Addr {
		a := b6
		x := uint32(a[12])<<24 | uint32(a[13])<<16 | uint32(a[14])<<8 | uint32(a[15])
		x += uint32(slot)*4 + off
		a[12], a[13], a[14], a[15] = byte(x>>24), byte(x>>16), byte(x>>8), byte(x)
		return netip.AddrFrom16(a)
	}
	return slotAddrs{
		Host4: at4(1), Guest4: at4(2), Net4: netip.PrefixFrom(at4(0), 30),
		Host6: at6(1), Guest6: at6(2), Net6: netip.PrefixFrom(at6(0), 126),
	}
}

// take returns the lowest free slot, or api.ErrLimit when all are used.
func (p *addrPool) take() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.slots {
		if !p.used[i] {
			p.used[i] = true
			return i, nil
		}
	}
	return 0, fmt.Errorf("egress address pool %s, %s: all %d slots in use: %w", p.v4, p.v6, p.slots, api.ErrLimit)
}

func (p *addrPool) release(slot int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.used, slot)
}

// resolvePolicy is the one function that decides a session's egress policy: Egress.Start
// enforces its result and ResolvePolicy answers it. Its sources are the ones the helper
// trusts: the system policy file, its own agent table and discovered (the host's own
// system configuration); the user, workspace and flag layers come from the client and
// can only tighten what the system allows (netpolicy.Resolve). Registries the client
// discovered in the user's own configuration (UserEgress.Discovered) are user-controlled
// whatever the client says: the system's denials remove them and forbid_allow_host drops
// them, as for user-added hosts. An empty a.Egress leaves the profile to the layers. It
// returns the policy and the system policy's digest ("none" without a file); errors wrap
// api.ErrPolicy.
func resolvePolicy(c *EgressConfig, a api.ResolvePolicyArgs, discovered []netpolicy.Discovered) (*netpolicy.Effective, string, error) {
	fail := func(err error) (*netpolicy.Effective, string, error) {
		return nil, "", fmt.Errorf("resolve egress policy: %w: %w", api.ErrPolicy, err)
	}
	sys, digest, err := loadSystemPolicy(c.PolicyPath)
	if err != nil {
		return fail(err)
	}
	var flags netpolicy.LayerConfig
	if a.Egress != "" {
		prof, err := netpolicy.ParseProfile(a.Egress)
		if err != nil {
			return fail(err)
		}
		flags.Profile = &prof
	}
	for _, h := range a.AllowHosts {
		e, err := netpolicy.ParseAllowHostFlag(h)
		if err != nil {
			return fail(fmt.Errorf("--allow-host: %w", err))
		}
		flags.Allow = append(flags.Allow, e)
	}
	agentHosts, err := c.agentHosts(a.Agent)
	if err != nil {
		return fail(err)
	}
	user, err := parseLayer(a.UserEgress)
	if err != nil {
		return fail(fmt.Errorf("user config: %w", err))
	}
	ws, err := parseLayer(a.WorkspaceEgress)
	if err != nil {
		return fail(fmt.Errorf("workspace config: %w", err))
	}
	if a.WorkspaceEgress != nil && len(a.WorkspaceEgress.Discovered) > 0 {
		return fail(fmt.Errorf("workspace config adds discovered host %q: %w", a.WorkspaceEgress.Discovered[0].Name, netpolicy.ErrLoosen))
	}
	userDisc, err := clientDiscovered(a.UserEgress)
	if err != nil {
		return fail(fmt.Errorf("user config: %w", err))
	}
	discovered = append(slices.Clip(discovered), userDisc...)
	eff, err := netpolicy.Resolve(netpolicy.Inputs{System: sys, User: user, Workspace: ws, Flags: flags,
		Agent: a.Agent, AgentHosts: agentHosts, Discovered: discovered})
	if err != nil {
		return fail(err)
	}
	return eff, digest, nil
}

// maxClientDiscovered bounds the registries one request may carry (a user's npm, pip,
// cargo and go configuration name a handful).
const maxClientDiscovered = 64

// clientDiscovered validates the registries a client discovered in the user's
// configuration and marks them user-controlled (nil layer: none).
func clientDiscovered(l *api.EgressLayer) ([]netpolicy.Discovered, error) {
	if l == nil {
		return nil, nil
	}
	if len(l.Discovered) > maxClientDiscovered {
		return nil, fmt.Errorf("%d discovered registries, at most %d: %w", len(l.Discovered), maxClientDiscovered, api.ErrBadRequest)
	}
	var out []netpolicy.Discovered
	for _, d := range l.Discovered {
		e, err := netpolicy.ParseEntry(d.Name, d.Ports...)
		if err != nil {
			return nil, fmt.Errorf("discovered registry %q: %w", d.Name, err)
		}
		if e.Pattern.Wildcard {
			return nil, fmt.Errorf("discovered registry %q: not an exact host name", d.Name)
		}
		tool, from := d.Tool, d.From
		if !printableShort(tool) || !printableShort(from) {
			return nil, fmt.Errorf("discovered registry %q: tool or source is not short printable text: %w", d.Name, api.ErrBadRequest)
		}
		out = append(out, netpolicy.Discovered{Entry: e, Tool: tool, From: from, UserControlled: true})
	}
	return out, nil
}

// printableShort reports whether s is at most 256 bytes of printable text (it ends up
// in logs and `brood policy show`).
func printableShort(s string) bool {
	if len(s) > 256 {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// parseLayer validates a client-sent configuration layer (nil: empty).
func parseLayer(l *api.EgressLayer) (netpolicy.LayerConfig, error) {
	if l == nil {
		return netpolicy.LayerConfig{}, nil
	}
	f := netpolicy.ConfigFile{Profile: l.Profile, AllowHosts: l.AllowHosts, DenyHosts: l.DenyHosts}
	for _, h := range l.Hosts {
		f.Hosts = append(f.Hosts, netpolicy.HostFile{Name: h.Name, Ports: h.Ports})
	}
	return f.Parse()
}

// loadSystemPolicy loads the system policy at path with netpolicy.LoadSystemPolicy (one
// read) and returns its digest: "sha256:<hex>" of the file, or "none" when there is no file.
func loadSystemPolicy(path string) (*netpolicy.SystemPolicy, string, error) {
	sys, err := netpolicy.LoadSystemPolicy(path)
	if err != nil {
		return nil, "", err
	}
	if sys == nil {
		return nil, "none", nil
	}
	return sys, sys.Digest, nil
}

// PolicyDigest reports the system policy's digest for Hello: "none" without a policy
// file, "invalid: ..." when it cannot be loaded (then every session with a network is
// refused).
func PolicyDigest(path string) string {
	_, d, err := loadSystemPolicy(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "none"
	}
	if err != nil {
		return "invalid: " + err.Error()
	}
	return d
}

// hostList renders the effective policy's allowed entries for EgressInfo.
func hostList(eff *netpolicy.Effective) []string {
	var out []string
	for _, g := range eff.Hosts {
		out = append(out, g.Entry.String())
	}
	slices.Sort(out)
	return out
}
