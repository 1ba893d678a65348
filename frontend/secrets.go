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
	// LoginNames name the agent's logins whose tokens Secrets binds (frontend/secrets
	// Result.LoginNames): sent as StartVMArgs.Logins with the bindings, so that the
	// helper allows the logins' hosts.
	LoginNames []string
	// Err is why the placeholders could not be made (a login file that does not parse):
	// the run fails with it only when they would be used.
	Err error
	// Logins are the host login files whose OAuth tokens are placeholders in the VM;
	// WriteBackLogins (--write-back-logins) writes the tokens refreshed in the session
	// back to them after it (afterRefresh), which a system policy with
	// forbid_login_write_back refuses.
	Logins          []LoginFile
	WriteBackLogins bool
}

// LoginFile is a host login file whose OAuth tokens the VM got as placeholders.
type LoginFile struct {
	// Show names it in the run output ("~/.codex/auth.json").
	Show string
	// WriteBack rewrites the file with those of the refreshed logins that are its own
	// and returns the fields it updated (none: none of them was its own); its error
	// (the file changed on the host meanwhile, say) names the file and is printed as a
	// warning (frontend/secrets.Login.WriteBack).
	WriteBack func([]api.RefreshedLogin) ([]string, error)
}

// loginWriteBack is a run's login files and whether their refreshed tokens are written
// back (Placeholders.Logins, WriteBackLogins).
type loginWriteBack struct {
	files     []LoginFile
	writeBack bool
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
	sec.WriteBack = p.WriteBackLogins && len(p.Logins) > 0 && caps.LoginWriteBack
	if p.WriteBackLogins && len(p.Logins) > 0 && !caps.LoginWriteBack {
		prog.Warn("secrets: --write-back-logins: this helper does not keep refreshed logins; tokens refreshed in the session will not be written back")
	}
	s.VM.Secrets = &sec
	if len(p.Logins) > 0 {
		s.logins = &loginWriteBack{files: p.Logins, writeBack: sec.WriteBack}
	}
	s.VM.Logins = slices.Clone(p.LoginNames)
	return s, nil
}

// secretsAllowed asks the helper, for a run that uses placeholders, whether the system
// policy forbids what it keeps raw (forbid_raw_env), --git-token (forbid_git_token) or
// --write-back-logins (forbid_login_write_back) (api.Policy, from resolve_policy with
// the run's egress inputs), before any session exists; a forbidden one is a
// *RefusedError wrapping api.ErrPolicy. p is the run's Placeholders (nil: nothing to
// ask).
func (w *Workflow) secretsAllowed(ctx context.Context, hc helperclient.Client, spec RunSpec, p *Placeholders) error {
	if p == nil || p.Err != nil || !hc.Caps().Secrets || (len(p.Raw) == 0 && p.Required == "" && !p.WriteBackLogins) {
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
	case pol.LoginWriteBackForbidden && p.WriteBackLogins:
		return &RefusedError{fmt.Errorf("--write-back-logins: %w: the system policy forbids it (forbid_login_write_back = true)", api.ErrPolicy)}
	}
	return nil
}

// afterRefresh says, once the VM ended (sum: its egress summary), what became of the
// login files' refreshed tokens. With --write-back-logins it fetches the session's
// refreshed logins from the helper (refreshed_logins: the owner's own session only) and
// writes each login file back (LoginFile.WriteBack), warning for a file it leaves
// alone. Otherwise, when the session refreshed a login, it says the host files were not
// written back. The values are in memory only, for this call.
func (v *runningVM) afterRefresh(sum *api.EgressSummary) {
	lw := v.spec.logins
	if lw == nil {
		return
	}
	refreshes := 0
	for _, c := range sum.Secrets {
		refreshes += c.Refreshes
	}
	var shows []string
	for _, f := range lw.files {
		shows = append(shows, f.Show)
	}
	written := false
	if lw.writeBack {
		ctx, cancel := context.WithTimeout(context.Background(), api.DefaultCallTimeout)
		r, err := v.hc.RefreshedLogins(ctx, v.id)
		cancel()
		if err != nil {
			v.prog.Warn("secrets: the refreshed tokens could not be fetched from the helper: %v", err)
		}
		for _, f := range lw.files {
			fields, err := f.WriteBack(r.Logins)
			switch {
			case err != nil:
				v.prog.Warn("secrets: %v", err)
			case len(fields) > 0:
				written = true
				v.prog.Printf("secrets: %s: the tokens refreshed in the session were written back (%s)", f.Show, strings.Join(fields, ", "))
			}
		}
	}
	if refreshes > 0 && !written {
		hint := ""
		if !lw.writeBack {
			hint = " (brood run --write-back-logins does that)"
		}
		v.prog.Printf("secrets: the login was refreshed in the session (%d token refresh(es)) and not written back to %s%s; if the provider rotates refresh tokens, the host file's refresh token may no longer work (sign in again on the host)",
			refreshes, strings.Join(shows, ", "), hint)
	}
}
