// Package policywire renders an effective egress policy (netpolicy.Effective) as the
// helper protocol's answer to resolve_policy (api.Policy). It is the one rendering: the
// helper answers with it, and `brood policy show` uses it for its labelled local fallback,
// so both print a policy the same way.
//
// Privilege: none; a pure conversion, linked into broodd-helper and brood.
package policywire

import (
	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
)

// Render returns eff as api.Policy: the profile and the layer (and default's source) that set it, every allowed
// host with its ports (as "443/tcp") and its layer and source, the denials, the entries
// dropped while merging, eff.Digest() and sysDigest (the system policy file's digest, ""
// when there is none). Hosts is never nil, so the JSON answer always has a list.
func Render(eff *netpolicy.Effective, sysDigest string) api.Policy {
	p := api.Policy{Profile: eff.Profile.String(), ProfileLayer: string(eff.ProfileLayer), ProfileSource: eff.ProfileSource,
		AllowHostForbidden: eff.AllowHostForbidden, DirectForbidden: eff.DirectForbidden,
		RawEnvForbidden: eff.RawEnvForbidden, GitTokenForbidden: eff.GitTokenForbidden,
		LoginWriteBackForbidden: eff.LoginWriteBackForbidden, SSHAgentForbidden: eff.SSHAgentForbidden, Hosts: []api.PolicyHost{}, Digest: eff.Digest(), SystemDigest: sysDigest}
	for _, g := range eff.Hosts {
		h := api.PolicyHost{Name: g.Entry.Pattern.String(), Layer: string(g.Source.Layer), Source: g.Source.Detail}
		for _, port := range g.Entry.EffectivePorts() {
			h.Ports = append(h.Ports, port.String())
		}
		p.Hosts = append(p.Hosts, h)
	}
	for _, d := range eff.Denied {
		p.Denied = append(p.Denied, api.PolicyDenial{Pattern: d.Pattern.String(), Layer: string(d.Layer)})
	}
	for _, n := range eff.Dropped {
		p.Dropped = append(p.Dropped, api.PolicyNote{What: n.What, Why: n.Why})
	}
	return p
}
