package egress

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"unicode"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
)

// resolvePolicy is the one function that decides a session's egress policy: Manager.Start
// enforces its result and ResolvePolicy answers it. Its sources are the ones the helper
// trusts: the system policy file, its own agent table, netpolicy's table of the agents'
// logins (the client names only which of its agent's logins the session forwards,
// a.Logins; the hosts are the table's) and discovered (the host's own system
// configuration); the user, workspace and flag layers come from the client and
// can only tighten what the system allows (netpolicy.Resolve). Registries the client
// discovered in the user's own configuration (UserEgress.Discovered) are user-controlled
// whatever the client says: the system's denials remove them and forbid_allow_host drops
// them, as for user-added hosts. An empty a.Egress or api.EgressDefault leaves the
// profile to the layers, then to the system policy's default_profile, then standard. It
// returns the policy and the system policy's digest ("none" without a file); errors wrap
// api.ErrPolicy.
func resolvePolicy(c *Config, a api.ResolvePolicyArgs, discovered []netpolicy.Discovered) (*netpolicy.Effective, string, error) {
	fail := func(err error) (*netpolicy.Effective, string, error) {
		return nil, "", fmt.Errorf("resolve egress policy: %w: %w", api.ErrPolicy, err)
	}
	sys, digest, err := loadSystemPolicy(c.PolicyPath)
	if err != nil {
		return fail(err)
	}
	var flags netpolicy.LayerConfig
	if a.Egress != "" && a.Egress != api.EgressDefault {
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
	agentHosts, err := c.AgentHosts(a.Agent)
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
		Agent: a.Agent, AgentHosts: agentHosts, Logins: a.Logins, Discovered: discovered})
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

// agentHostList renders the effective policy's entries that the agent's LLM provider
// added (netpolicy.LayerAgent), as hostList does.
func agentHostList(eff *netpolicy.Effective) []string {
	var out []string
	for _, g := range eff.Hosts {
		if g.Source.Layer == netpolicy.LayerAgent {
			out = append(out, g.Entry.String())
		}
	}
	slices.Sort(out)
	return out
}
