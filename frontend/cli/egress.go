package cli

import (
	"context"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
)

// egressFlags are the egress flags of `brood run` and `brood policy show`.
type egressFlags struct {
	profile    string   // --egress: locked, standard, permissive, none; empty: not given (egress_default.go)
	allowHosts []string // --allow-host, repeatable
}

func (f *egressFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.profile, "egress", "", "egress profile: locked (the agent's LLM provider only), standard (+ code hosts and\nthe package registries this host uses), permissive (public internet), none (no network);\nnot given: an agent gets the system policy's default_profile, else standard; shell and\nrun-image get no network")
	fs.StringArrayVar(&f.allowHosts, "allow-host", nil, "also allow NAME, *.SUFFIX or NAME:PORT[/proto] (repeatable; host names only, no IP address\nand no public suffix such as *.co.uk or *.github.io; refused if the system policy forbids it)")
}

// layer parses the flags into the flags layer of the policy. Errors are usage errors,
// including a host the flags layer may never allow (netpolicy.CheckGrant: a wildcard over
// a private-section public suffix such as *.github.io, which only the system policy may
// allow), so that every invalid --allow-host exits alike in run, run-image and policy show.
func (f *egressFlags) layer() (netpolicy.LayerConfig, error) {
	var l netpolicy.LayerConfig
	if f.profile != "" && f.profile != egressNone {
		p, err := netpolicy.ParseProfile(f.profile)
		if err != nil {
			return l, usageErr("--egress %q: %v", f.profile, err)
		}
		l.Profile = &p
	}
	for _, h := range f.allowHosts {
		e, err := netpolicy.ParseAllowHostFlag(h)
		if err != nil {
			return l, usageErr("--allow-host %q: %v", h, err)
		}
		if err := netpolicy.CheckGrant(e, netpolicy.Source{Layer: netpolicy.LayerFlags}); err != nil {
			return l, usageErr("--allow-host %q: %v", h, err)
		}
		l.Allow = append(l.Allow, e)
	}
	return l, nil
}

// apply checks the flags and copies them into a StartVM request of an agent run or not
// (wire: the network an agent gets by default). --allow-host without a network is a
// usage error (there would be no network to allow it on).
func (f *egressFlags) apply(a *api.StartVMArgs, agent bool) error {
	egress, err := f.wire(agent)
	if err != nil {
		return err
	}
	a.Egress = egress
	a.AllowHosts = append([]string(nil), f.allowHosts...)
	return nil
}

// egressInputs are one command's egress inputs, built once from the configuration it
// read and the flags: the request the helper resolves (the same for `brood run`, in
// StartVMArgs, and `brood policy show`, in ResolvePolicy), and the same layers parsed,
// for policy show's local computation when no helper answers.
type egressInputs struct {
	args api.ResolvePolicyArgs
	// local is args as netpolicy.Inputs without System and AgentHosts (the helper's to
	// supply); Discovered holds the system-wide and the user's registries.
	local netpolicy.Inputs
	// notes name the configuration files discovery did not read.
	notes []netpolicy.Note
	// agentRun: the inputs are those of an agent run (agentRun), which has a network
	// without --egress.
	agentRun bool
}

// newEgressInputs builds the inputs of agent's policy from the user config, the workspace
// config and the flags; egress is the request's Egress (egressFlags.wire). With discover
// it also discovers the registries of the host's and the user's tool configuration
// (discoverAll; the user's travel in UserEgress.Discovered). Flag errors are usage errors.
func newEgressInputs(ctx context.Context, user *userConfig, ws *workspaceConfig, workspace, agent string, flags *egressFlags, egress string, discover bool) (*egressInputs, error) {
	fl, err := flags.layer()
	if err != nil {
		return nil, err
	}
	in := &egressInputs{
		args: api.ResolvePolicyArgs{Egress: egress, AllowHosts: slices.Clone(flags.allowHosts), Agent: agent,
			UserEgress: egressLayer(user.Egress), WorkspaceEgress: egressLayer(ws.Egress)},
		local: netpolicy.Inputs{User: user.egress, Workspace: ws.egress, Flags: fl, Agent: agent},
	}
	if discover {
		in.local.Discovered, in.notes = discoverAll(ctx, workspace)
		in.args.UserEgress = withUserDiscovered(in.args.UserEgress, in.local.Discovered)
	}
	return in, nil
}

// egressLayer converts an [egress] table for the helper (nil when it sets nothing).
func egressLayer(f netpolicy.ConfigFile) *api.EgressLayer {
	if f.Profile == "" && len(f.AllowHosts) == 0 && len(f.DenyHosts) == 0 && len(f.Hosts) == 0 {
		return nil
	}
	l := &api.EgressLayer{Profile: f.Profile, AllowHosts: f.AllowHosts, DenyHosts: f.DenyHosts}
	for _, h := range f.Hosts {
		l.Hosts = append(l.Hosts, api.EgressLayerHost{Name: h.Name, Ports: h.Ports})
	}
	return l
}

// userDiscoverer discovers the registries of the user's own tool configuration, parsing
// files and never running a tool. A configuration file inside workspace (the home
// directory is the workspace, or is in it) counts only when review holds every change to
// it (diff.PathRisk), so an applied session cannot add hosts. A variable so tests can
// point it at a fake home.
var userDiscoverer = func(workspace string) netpolicy.Discoverer {
	return netpolicy.Discoverer{Workspace: workspace, WorkspaceRisk: diff.PathRisk}
}

// discoverTimeout bounds registry discovery (local file reads only).
const discoverTimeout = 5 * time.Second

// discoverAll returns the registries of the host's system-wide configuration and of the
// user's own (netpolicy.Discoverer), the latter marked UserControlled, with the notes on
// configuration files that were not read.
func discoverAll(ctx context.Context, workspace string) ([]netpolicy.Discovered, []netpolicy.Note) {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, discoverTimeout)
	defer cancel()
	return userDiscoverer(workspace).Discover(ctx)
}

// withUserDiscovered adds the registries of disc found in the user's own configuration
// (npm, pip, cargo, go: the UserControlled ones; the helper rediscovers system-wide ones
// itself) to the user layer sent to the helper, which treats them as user-added: used from
// the standard profile up, removed by denials, dropped when the system forbids adding
// hosts. It returns user unchanged when there are none.
func withUserDiscovered(user *api.EgressLayer, disc []netpolicy.Discovered) *api.EgressLayer {
	var out []api.EgressDiscovered
	for _, d := range disc {
		if !d.UserControlled || d.Entry.Pattern.Wildcard {
			continue
		}
		ed := api.EgressDiscovered{Name: d.Entry.Pattern.Name, Tool: d.Tool, From: shortFrom(d.From)}
		for _, p := range d.Entry.Ports {
			ed.Ports = append(ed.Ports, p.String())
		}
		out = append(out, ed)
	}
	if len(out) == 0 {
		return user
	}
	if user == nil {
		user = &api.EgressLayer{}
	}
	user.Discovered = append(user.Discovered, out...)
	return user
}

// maxFrom is the longest source text the helper accepts for a discovered registry (bytes).
const maxFrom = 256

// shortFrom keeps the end of a source text longer than maxFrom (the file name and any
// workspace label), marked with a leading "...", cut on a rune boundary.
func shortFrom(s string) string {
	if len(s) <= maxFrom {
		return s
	}
	i := len(s) - (maxFrom - 3)
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return "..." + s[i:]
}
