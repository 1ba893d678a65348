package frontend

import (
	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox/guestcfg"
)

// Placeholders is the guest side of a run whose credentials are all placeholders
// (frontend/secrets.Discover) and the bindings the helper's egress process needs to swap
// them. Secrets holds the real values: Run sends it with StartVM and writes it nowhere.
type Placeholders struct {
	Env       [][2]string
	HomeFiles []guestcfg.HomeFile
	Notes     []string
	Secrets   api.SessionSecrets
}

// withSecrets returns s as it runs with a helper of caps: with s.Placeholders' guest side
// and its bindings in the StartVM request when the helper swaps placeholders
// (caps.Secrets), else s itself, the guest then holding the real values, which the run
// output says once when there are any.
func (s RunSpec) withSecrets(caps api.Capabilities, prog Progress) RunSpec {
	p := s.Placeholders
	s.Placeholders = nil
	if p == nil || len(p.Secrets.Bindings) == 0 {
		return s
	}
	if !caps.Secrets {
		prog.Printf("secrets: this helper does not swap placeholders yet: the VM gets the real values of %d credential(s)", len(p.Secrets.Bindings))
		return s
	}
	s.Env, s.HomeFiles, s.Notes = p.Env, p.HomeFiles, p.Notes
	sec := p.Secrets
	s.VM.Secrets = &sec
	return s
}
