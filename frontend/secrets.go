package frontend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"brood.dev/brood/frontend/helperclient"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox/guestcfg"
)

// ErrSecretsUnsupported reports an option that needs placeholders swapped outside the
// VM, run against a helper that does not swap them (api.Capabilities.Secrets).
var ErrSecretsUnsupported = errors.New("the helper does not swap placeholders for real values yet")

// Placeholders is the guest side of a run whose credentials are all placeholders
// (frontend/secrets.Discover) and the bindings the helper's egress process needs to swap
// them. Secrets holds the real values: Run sends it with StartVM and writes it nowhere.
type Placeholders struct {
	Env       [][2]string
	HomeFiles []guestcfg.HomeFile
	Notes     []string
	Secrets   api.SessionSecrets
	// Required names the option that needs a helper that swaps placeholders
	// ("--git-token"); empty: without one the run goes on with the real values.
	Required string
	// Raw names the credential variables the agent's raw_env keeps raw; a system policy
	// with forbid_raw_env refuses the run.
	Raw []string
	// Logins name the agent's logins whose tokens Secrets binds (frontend/secrets
	// Result.Logins): sent as StartVMArgs.Logins with the bindings, so that the helper
	// allows the logins' hosts.
	Logins []string
	// Err is why the placeholders could not be made (a login file that does not parse):
	// the run fails with it only when they would be used.
	Err error
}

// useSecrets returns spec as it runs with hc (withSecrets), once the system policy
// allows what it keeps raw or asks for (secretsAllowed).
func (w *Workflow) useSecrets(ctx context.Context, hc helperclient.Client, spec RunSpec, prog Progress) (RunSpec, error) {
	p := spec.Placeholders
	spec, err := spec.withSecrets(hc.Caps(), prog)
	if err != nil {
		return spec, err
	}
	return spec, w.secretsAllowed(ctx, hc, spec, p)
}

// withSecrets returns s as it runs with a helper of caps: with s.Placeholders' guest side,
// its bindings and the logins they belong to (StartVMArgs.Logins) in the StartVM request
// when the helper swaps placeholders (caps.Secrets), else s itself, the guest then
// holding the real values, which the run output says once when there are any. It returns ErrSecretsUnsupported, naming the
// option, when Placeholders.Required is set and the helper does not swap, and
// Placeholders.Err when the placeholders would be used.
func (s RunSpec) withSecrets(caps api.Capabilities, prog Progress) (RunSpec, error) {
	p := s.Placeholders
	s.Placeholders = nil
	if p == nil {
		return s, nil
	}
	if p.Err != nil && (caps.Secrets || p.Required != "") {
		return s, p.Err
	}
	if p.Err != nil || len(p.Secrets.Bindings) == 0 {
		return s, nil
	}
	if !caps.Secrets {
		if p.Required != "" {
			return s, fmt.Errorf("%s: %w", p.Required, ErrSecretsUnsupported)
		}
		prog.Printf("secrets: this helper does not swap placeholders yet: the VM gets the real values of %d credential(s)", len(p.Secrets.Bindings))
		return s, nil
	}
	s.Env, s.HomeFiles, s.Notes = p.Env, p.HomeFiles, p.Notes
	sec := p.Secrets
	s.VM.Secrets = &sec
	s.VM.Logins = slices.Clone(p.Logins)
	return s, nil
}

// secretsAllowed asks the helper, for a run that uses placeholders, whether the system
// policy forbids what it keeps raw (forbid_raw_env) or --git-token (forbid_git_token)
// (api.Policy, from resolve_policy with the run's egress inputs), before any session
// exists; a forbidden one is a *RefusedError wrapping api.ErrPolicy. p is the run's
// Placeholders (nil: nothing to ask).
func (w *Workflow) secretsAllowed(ctx context.Context, hc helperclient.Client, spec RunSpec, p *Placeholders) error {
	if p == nil || p.Err != nil || !hc.Caps().Secrets || (len(p.Raw) == 0 && p.Required == "") {
		return nil
	}
	pol, err := hc.ResolvePolicy(ctx, spec.VM.PolicyArgs())
	switch {
	case api.IsCode(err, api.CodeUnknownCall):
		return nil // a helper without resolve_policy has no such keys either
	case err != nil:
		return fmt.Errorf("run with placeholders: ask the helper's policy: %w", err)
	case pol.RawEnvForbidden && len(p.Raw) > 0:
		return &RefusedError{fmt.Errorf("raw_env %s: %w: the system policy forbids raw credentials (forbid_raw_env = true)", strings.Join(p.Raw, ", "), api.ErrPolicy)}
	case pol.GitTokenForbidden && p.Required == "--git-token":
		return &RefusedError{fmt.Errorf("--git-token: %w: the system policy forbids it (forbid_git_token = true)", api.ErrPolicy)}
	}
	return nil
}
