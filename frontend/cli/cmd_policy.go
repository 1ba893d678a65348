package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
	"brood.dev/brood/netpolicy/policywire"
)

// noEgressNote heads `brood policy show` without --egress for the shell agent: the merged
// policy below is what the layers allow, but brood run shell and brood run-image without
// --egress have no network at all (an agent's note is agentNetworkNote).
const noEgressNote = "without --egress, brood run shell and brood run-image give the VM no network device; with --egress PROFILE, these layers apply:"

// notFromHelper starts the first line of `brood policy show` when the helper did not
// answer and the policy was computed locally.
const notFromHelper = "not from the helper: "

// policyAskTimeout bounds policy show's wait for the helper (connect and answer).
const policyAskTimeout = 10 * time.Second

func newPolicyCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "policy",
		Short: "Inspect the egress policy",
		Args:  cobra.NoArgs,
	}
	var (
		flags      egressFlags
		agent      string
		workspace  string
		systemPath string
		jsonOut    bool
	)
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the effective egress profile and hosts, with the layer that set each",
		Long: `show asks the helper for the policy a brood run with the same agent, flags and files would
enforce, and prints its answer: the profile and who chose it (a layer, or for a default the
system policy's default_profile or the built-in default, standard), every allowed host with
its ports and the layer that added it, the denials and the policy's digest (brood run prints
the same digest). Without --egress an agent's run has this network; the shell (the default
--agent) and run-image have none. The
helper merges tighten-only: the system policy (IT's; egress.policy_path of the helper's
config, default ` + netpolicy.SystemPolicyPath + `), your config ($XDG_CONFIG_HOME/brood/config.toml,
[egress] table), the workspace's .brood.toml ([egress]; it may remove hosts, never add them)
and the flags, plus the agent's LLM provider hosts (the helper's agent table) and the package
registries this host is configured to use: system-wide (apt sources, /etc/npmrc) and your own
(npm, pnpm, yarn, pip, cargo, go configuration files and variables, read without running any
tool), which counts as hosts you added (a system policy that forbids --allow-host drops them).
When your home directory is inside the workspace, its configuration files are workspace
content: one is used only when review never applies a change to it unnamed (the line says
so), and is otherwise listed as "not read".

When no helper answers, the policy is computed here from the built-in defaults and the files
brood can read, and the first line says so ("` + notFromHelper + `..."): the helper's own
configuration may give a different answer.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			in, network, err := policyShowInputs(cmd.Context(), agent, workspace, &flags)
			if err != nil {
				return err
			}
			p, err := showPolicy(cmd.Context(), in, systemPath)
			p.Network = network
			if err != nil {
				if errors.Is(err, netpolicy.ErrLoosen) || errors.Is(err, netpolicy.ErrAllowHostForbidden) || errors.Is(err, api.ErrPolicy) {
					return refusedErr(err)
				}
				return err
			}
			if jsonOut {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(p)
			}
			p.writeText(cmd.OutOrStdout(), policyNote(flags.profile, in.agentRun), in.notes)
			return nil
		},
	}
	flags.register(show.Flags())
	show.Flags().StringVar(&agent, "agent", "shell", "the agent whose LLM provider hosts and default network to show (as for brood run AGENT)")
	show.Flags().StringVar(&workspace, "workspace", ".", "workspace directory (its .brood.toml)")
	show.Flags().BoolVar(&jsonOut, "json", false, "print JSON: network, profile, profile_layer, profile_source, hosts [{name, ports, layer, source}],\ndenied, dropped, digest, from_helper")
	show.Flags().StringVar(&systemPath, "system-policy", netpolicy.SystemPolicyPath, "system policy file of the local computation (no helper)")
	show.Flags().MarkHidden("system-policy")
	root.AddCommand(show)
	return root
}

// policyShowInputs reads the user config and the workspace's .brood.toml once and builds
// the egress inputs brood run would send for agentName (resolveAgent, agentForPolicy,
// egressFlags.wire), and whether that run would have a network.
func policyShowInputs(ctx context.Context, agentName, workspace string, flags *egressFlags) (*egressInputs, bool, error) {
	// The same checks and exit codes as session new (workspace) and run (config files).
	fi, err := os.Stat(workspace)
	if err != nil {
		return nil, false, usageErr("policy show: workspace: %v", err)
	}
	if !fi.IsDir() {
		return nil, false, usageErr("policy show: workspace %q is not a directory", workspace)
	}
	path, err := userConfigPath()
	if err != nil {
		return nil, false, err
	}
	user, err := loadUserConfig(path)
	if err != nil {
		return nil, false, usageErr("policy show: %v", err)
	}
	ws, err := loadWorkspaceConfig(workspace)
	if err != nil {
		return nil, false, usageErr("policy show: %v", err)
	}
	a, err := resolveAgent(agentName, user, path)
	if err != nil {
		return nil, false, usageErr("policy show: %v", err)
	}
	egress, err := flags.wire(agentRun(a))
	if err != nil {
		return nil, false, err
	}
	in, err := newEgressInputs(ctx, user, ws, workspace, runRequest{agent: a}.agentForPolicy(), flags, egress, true)
	if err != nil {
		return nil, false, err
	}
	in.agentRun = agentRun(a)
	in.args.Logins = runLogins(in.args.Agent, os.Environ())
	in.local.Logins = in.args.Logins
	return in, egress != "", nil
}

// shownPolicy is what `brood policy show` prints: a policy and where it came from.
type shownPolicy struct {
	api.Policy
	// FromHelper: the helper answered (ResolvePolicy); otherwise NotFromHelper says why
	// not, and the policy was computed locally.
	FromHelper bool `json:"from_helper"`
	// Network: brood run with the same agent and flags gives the VM a network with this
	// policy (an agent without --egress, or a profile); false: no network device.
	Network       bool   `json:"network"`
	Helper        string `json:"helper,omitempty"` // the helper's socket, when it answered
	NotFromHelper string `json:"not_from_helper,omitempty"`
}

// showPolicy asks the helper at api.SocketPath to resolve in.args. When no helper answers
// (none listens, the caller may not use it, or it cannot resolve policies) it computes
// the policy locally (localPolicy). A policy the inputs may not have is an error wrapping
// api.ErrPolicy (from the helper) or netpolicy's sentinels (local).
func showPolicy(ctx context.Context, in *egressInputs, systemPath string) (shownPolicy, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, policyAskTimeout)
	defer cancel()
	socket := api.SocketPath()
	c, err := api.Dial(ctx, socket)
	if err != nil {
		return localPolicy(in, systemPath, fmt.Sprintf("cannot ask the helper (%v)", err))
	}
	defer c.Close()
	p, err := c.ResolvePolicy(ctx, in.args)
	switch {
	case err == nil:
		return shownPolicy{Policy: p, FromHelper: true, Helper: socket}, nil
	case api.IsCode(err, api.CodeUnknownCall) || api.IsCode(err, api.CodeUnavailable):
		return localPolicy(in, systemPath, fmt.Sprintf("the helper at %s cannot resolve policies (%v)", socket, err))
	}
	return shownPolicy{}, fmt.Errorf("policy show: helper at %s: %w", socket, err)
}

// localPolicy computes the policy of in with netpolicy.Resolve from what this process can
// read: the system policy at systemPath (one the caller may not read is left out, and the
// note says so), the built-in agent table, the user's and workspace's layers and the
// registries discovered here. why says why the helper did not answer.
func localPolicy(in *egressInputs, systemPath, why string) (shownPolicy, error) {
	note := notFromHelper + why + "; computed locally from the built-in defaults and the files brood can read (the helper's configuration may differ)"
	local := in.local
	sys, err := netpolicy.LoadSystemPolicy(systemPath)
	switch {
	case errors.Is(err, fs.ErrPermission):
		note += "; system policy " + systemPath + " not readable, left out"
	case err != nil:
		return shownPolicy{}, fmt.Errorf("system policy %s: %w", systemPath, err)
	}
	local.System = sys
	hosts, _ := netpolicy.BuiltinAgentHosts(local.Agent)
	for _, h := range hosts {
		e, err := netpolicy.ParseAllowHostFlag(h)
		if err != nil {
			return shownPolicy{}, fmt.Errorf("built-in agent %s host %q: %w", local.Agent, h, err)
		}
		local.AgentHosts = append(local.AgentHosts, e)
	}
	eff, err := netpolicy.Resolve(local)
	if err != nil {
		return shownPolicy{}, err
	}
	sysDigest := "none"
	if sys != nil {
		sysDigest = sys.Digest
	}
	return shownPolicy{Policy: policywire.Render(eff, sysDigest), NotFromHelper: note}, nil
}

// secretsPolicyLines are the lines of `brood policy show` saying which secrets features
// the system policy forbids (forbid_raw_env, forbid_git_token, forbid_login_write_back,
// allow_ssh_agent = false): "raw_env\tforbidden\t(system)" or "...\tallowed\t(system)".
func secretsPolicyLines(p api.Policy) []string {
	var out []string
	for _, r := range []struct {
		what      string
		forbidden bool
	}{
		{"raw_env", p.RawEnvForbidden},
		{"git-token", p.GitTokenForbidden},
		{"write-back-logins", p.LoginWriteBackForbidden},
		{"ssh-agent", p.SSHAgentForbidden},
	} {
		state := "allowed"
		if r.forbidden {
			state = "forbidden"
		}
		out = append(out, r.what+"\t"+state+"\t("+string(netpolicy.LayerSystem)+")")
	}
	return out
}

// writeText prints p one tab-separated line per item: where it came from, then note
// (policyNote: the network brood run would give; "" prints nothing), the profile with the
// layer (and, for a default, the source) that chose it, hosts, denials, dropped entries,
// the digest and the configuration files discovery did not read. Helper-supplied text is
// escaped.
func (p shownPolicy) writeText(w io.Writer, note string, notes []netpolicy.Note) {
	if p.FromHelper {
		fmt.Fprintf(w, "from the helper at %s\n", p.Helper)
	} else {
		fmt.Fprintln(w, p.NotFromHelper)
	}
	if note != "" {
		fmt.Fprintln(w, note)
	}
	esc := diff.Escape
	chosen := p.ProfileLayer
	if p.ProfileSource != "" {
		chosen += ": " + p.ProfileSource
	}
	fmt.Fprintf(w, "profile\t%s\t(%s)\n", esc(p.Profile), esc(chosen))
	if p.AllowHostForbidden {
		fmt.Fprintf(w, "allow-host\tforbidden\t(%s)\n", netpolicy.LayerSystem)
	}
	fmt.Fprintln(w, directPolicyLine(p.DirectForbidden)) // directmode.go
	for _, l := range secretsPolicyLines(p.Policy) {
		fmt.Fprintln(w, l)
	}
	for _, h := range p.Hosts {
		src := h.Layer
		if h.Source != "" {
			src += " (" + h.Source + ")"
		}
		fmt.Fprintf(w, "allow\t%s (%s)\t(%s)\n", esc(h.Name), esc(strings.Join(h.Ports, ", ")), esc(src))
	}
	for _, d := range p.Denied {
		fmt.Fprintf(w, "deny\t%s\t(%s)\n", esc(d.Pattern), esc(d.Layer))
	}
	for _, n := range p.Dropped {
		fmt.Fprintf(w, "dropped\t%s\t(%s)\n", esc(n.What), esc(n.Why))
	}
	fmt.Fprintf(w, "digest\t%s\t(system policy %s)\n", esc(p.Digest), esc(p.SystemDigest))
	for _, n := range notes {
		if strings.HasPrefix(n.Why, netpolicy.WorkspaceNotRead) {
			fmt.Fprintf(w, "not read\t%s\t(%s)\n", n.What, n.Why)
		}
	}
	fmt.Fprintln(w)
}
