package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/pelletier/go-toml/v2"
	"github.com/spf13/pflag"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
)

// egressFlags are the egress flags of `brood run` and `brood policy show`.
type egressFlags struct {
	profile    string   // --egress: locked, standard, permissive; empty: no network
	allowHosts []string // --allow-host, repeatable
}

func (f *egressFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.profile, "egress", "", "egress profile: locked (the agent's LLM provider only), standard (+ code hosts and\nthe package registries this host uses), permissive (public internet); empty: no network")
	fs.StringArrayVar(&f.allowHosts, "allow-host", nil, "also allow NAME, *.SUFFIX or NAME:PORT[/proto] (repeatable; host names only, no IP address\nand no public suffix such as *.co.uk or *.github.io; refused if the system policy forbids it)")
}

// layer parses the flags into the flags layer of the policy. Errors are usage errors.
func (f *egressFlags) layer() (netpolicy.LayerConfig, error) {
	var l netpolicy.LayerConfig
	if f.profile != "" {
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
		l.Allow = append(l.Allow, e)
	}
	return l, nil
}

// apply checks the flags and copies them into a StartVM request. --allow-host without
// --egress is a usage error (there would be no network to allow it on).
func (f *egressFlags) apply(a *api.StartVMArgs) error {
	if _, err := f.layer(); err != nil {
		return err
	}
	if f.profile == "" && len(f.allowHosts) > 0 {
		return usageErr("--allow-host needs --egress PROFILE (without one the VM has no network)")
	}
	a.Egress = f.profile
	a.AllowHosts = append([]string(nil), f.allowHosts...)
	return nil
}

// egressFile is the part of the user config and of a workspace .brood.toml that
// `brood policy show` reads: the `[egress]` table (netpolicy.ConfigFile).
type egressFile struct {
	Egress netpolicy.ConfigFile `toml:"egress"`
}

// loadEgressFile reads and validates the [egress] table of the TOML file at path (other
// tables are ignored here; their owners check them). A missing file is an empty table.
func loadEgressFile(path string) (netpolicy.ConfigFile, netpolicy.LayerConfig, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return netpolicy.ConfigFile{}, netpolicy.LayerConfig{}, nil
	}
	if err != nil {
		return netpolicy.ConfigFile{}, netpolicy.LayerConfig{}, fmt.Errorf("read %s: %w", path, err)
	}
	var f egressFile
	if err := toml.NewDecoder(bytes.NewReader(data)).Decode(&f); err != nil {
		return netpolicy.ConfigFile{}, netpolicy.LayerConfig{}, fmt.Errorf("parse %s: %w: %w", path, ErrConfig, err)
	}
	l, err := f.Egress.Parse()
	if err != nil {
		return netpolicy.ConfigFile{}, netpolicy.LayerConfig{}, fmt.Errorf("%s [egress]: %w: %w", path, ErrConfig, err)
	}
	return f.Egress, l, nil
}

func loadEgressLayer(path string) (netpolicy.LayerConfig, error) {
	_, l, err := loadEgressFile(path)
	return l, err
}

// egressLayers returns the [egress] tables of the user config at userPath and of the
// workspace's .brood.toml for StartVMArgs.UserEgress and WorkspaceEgress (nil when a
// file has none). The helper merges them (tighten-only) with the system policy.
func egressLayers(userPath, workspace string) (user, ws *api.EgressLayer, err error) {
	conv := func(path string) (*api.EgressLayer, error) {
		f, _, err := loadEgressFile(path)
		if err != nil || (f.Profile == "" && len(f.AllowHosts) == 0 && len(f.DenyHosts) == 0 && len(f.Hosts) == 0) {
			return nil, err
		}
		l := &api.EgressLayer{Profile: f.Profile, AllowHosts: f.AllowHosts, DenyHosts: f.DenyHosts}
		for _, h := range f.Hosts {
			l.Hosts = append(l.Hosts, api.EgressLayerHost{Name: h.Name, Ports: h.Ports})
		}
		return l, nil
	}
	if user, err = conv(userPath); err != nil {
		return nil, nil, err
	}
	if ws, err = conv(filepath.Join(workspace, workspaceConfigName)); err != nil {
		return nil, nil, err
	}
	return user, ws, nil
}

// workspaceConfigName is the workspace's own brood configuration file.
const workspaceConfigName = ".brood.toml"

// effectivePolicy merges the layers as the helper will (netpolicy.Resolve): the system
// policy at systemPath, the user config, the workspace's .brood.toml, the flags, the
// agent's provider hosts and the discovered registries (discoverAll: the host's
// system-wide configuration and the user's own, which the helper treats as user-added).
func effectivePolicy(systemPath, userPath, workspace, agent string, flags *egressFlags, disc []netpolicy.Discovered) (*netpolicy.Effective, error) {
	sys, err := netpolicy.LoadSystemPolicy(systemPath)
	if err != nil {
		return nil, fmt.Errorf("system policy %s: %w", systemPath, err)
	}
	user, err := loadEgressLayer(userPath)
	if err != nil {
		return nil, err
	}
	ws, err := loadEgressLayer(filepath.Join(workspace, workspaceConfigName))
	if err != nil {
		return nil, err
	}
	fl, err := flags.layer()
	if err != nil {
		return nil, err
	}
	in := netpolicy.Inputs{System: sys, User: user, Workspace: ws, Flags: fl, Agent: agent, Discovered: disc}
	if hosts, ok := netpolicy.BuiltinAgentHosts(agent); ok {
		for _, h := range hosts {
			e, err := netpolicy.ParseEntry(h)
			if err != nil {
				return nil, err
			}
			in.AgentHosts = append(in.AgentHosts, e)
		}
	}
	return netpolicy.Resolve(in)
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

// withUserDiscovered adds the registries discovered in the user's own configuration
// (npm, pip, cargo, go: UserControlled ones; the helper rediscovers system-wide ones
// itself) to the user layer sent to the helper, which treats them as user-added: used from
// the standard profile up, removed by denials, dropped when the system forbids adding
// hosts. workspace is the session's W (see userDiscoverer). It returns user unchanged
// when nothing was discovered.
func withUserDiscovered(ctx context.Context, user *api.EgressLayer, workspace string) *api.EgressLayer {
	var out []api.EgressDiscovered
	disc, _ := discoverAll(ctx, workspace)
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
