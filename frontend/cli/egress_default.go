package cli

import (
	"fmt"

	"brood.dev/brood/helper/api"
)

// egressNone is the --egress value that turns the network off (no network device).
const egressNone = "none"

// agentNetworkNote heads `brood policy show --agent AGENT` without --egress: an agent run
// gets a network by default, with the policy below.
const agentNetworkNote = "without --egress, brood run of this agent gives the VM a network with this policy (--egress none: no network):"

// noneNote heads `brood policy show --egress none`.
const noneNote = "--egress none: brood run gives the VM no network device; with a profile, these layers apply:"

// agentRun reports whether a is an agent that gets a network by default: a built-in or
// configured agent with a command. The shell agent (a login shell, or shell -- CMD) and
// run-image get none unless --egress names a profile.
func agentRun(a Agent) bool { return len(a.Command) > 0 && a.Name != "run-image" }

// wire returns the StartVMArgs.Egress value of the flags for a run that is (or is not)
// an agent run: the named profile; api.EgressDefault for an agent run without --egress
// (the helper chooses the profile: the layers', else the system's default_profile, else
// standard); "" for no network (--egress none, or no --egress outside an agent run).
// --allow-host without a network is a usage error.
func (f *egressFlags) wire(agent bool) (string, error) {
	if _, err := f.layer(); err != nil {
		return "", err
	}
	egress := f.profile
	switch {
	case egress == egressNone:
		egress = ""
	case egress == "" && agent:
		egress = api.EgressDefault
	}
	if egress == "" && len(f.allowHosts) > 0 {
		if f.profile == egressNone {
			return "", usageErr("--allow-host with --egress none: there is no network to allow it on")
		}
		return "", usageErr("--allow-host needs --egress PROFILE (without one the VM has no network)")
	}
	return egress, nil
}

// policyNote is the line `brood policy show` prints above the policy: what network brood
// run would give with these flags (none, the default of an agent run), or "" when
// --egress names a profile.
func policyNote(profile string, agent bool) string {
	switch {
	case profile == egressNone:
		return noneNote
	case profile == "" && agent:
		return agentNetworkNote
	case profile == "":
		return noEgressNote
	}
	return ""
}

// profileText renders a policy's profile with who chose it: "standard (default:
// built-in default)", "locked (system: default_profile)", "locked (flags)".
func profileText(p api.Policy) string {
	if p.ProfileSource == "" {
		return fmt.Sprintf("%s (%s)", p.Profile, p.ProfileLayer)
	}
	return fmt.Sprintf("%s (%s: %s)", p.Profile, p.ProfileLayer, p.ProfileSource)
}

// egressStartHint advises on a StartVM refused for its network (egress is the request's
// Egress): a helper without a network layer, or a policy the system refuses. An agent run
// that asked for the default network is told how to run without one.
func egressStartHint(r runRequest, egress string) string {
	hint := "\nhint: brood policy show --agent " + r.agent.Name + " asks the helper for this policy; brood doctor checks the helper"
	if egress == api.EgressDefault {
		hint += "\nan agent gets a network by default: --egress none runs it without one"
	}
	return hint
}
