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
// allows what it keeps raw or asks for (secretsAllowed); it notes a write-back asked for
// that does nothing in this run (no login file, or no network).
func (w *Workflow) useSecrets(ctx context.Context, hc helperclient.Client, spec RunSpec, prog Progress) (RunSpec, error) {
	p := spec.Placeholders
	spec, err := spec.withSecrets(hc.Caps(), prog)
	if err != nil {
		return spec, err
	}
	if err := w.secretsAllowed(ctx, hc, spec, p); err != nil {
		return spec, err
	}
	switch {
	case spec.WriteBackAsked == "":
	case spec.logins == nil:
		prog.Printf("secrets: %s does nothing in this run: no login file is copied with placeholders", spec.WriteBackAsked)
	case spec.VM.Egress == "" || spec.VM.Egress == "none":
		prog.Printf("secrets: %s does nothing in this run: without a network no login is refreshed", spec.WriteBackAsked)
	}
	return spec, nil
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
	if s.VM.Egress == "" || s.VM.Egress == "none" {
		s.Notes = offlineNotes(p.Notes)
	}
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

// offlineNotes returns notes for a session without a network: a placeholder note's
// "the real value goes only to HOST" (frontend/secrets) becomes that the real value is
// not usable in this session, since no host can be reached.
func offlineNotes(notes []string) []string {
	out := make([]string, len(notes))
	for i, n := range notes {
		for _, what := range []string{"value", "token"} {
			if head, _, ok := strings.Cut(n, "; the real "+what+" goes only to "); ok {
				n = head + "; no network in this session (--egress), so the real " + what + " is not usable"
			}
		}
		out[i] = n
	}
	return out
}

// secretsAllowed asks the helper, before any session exists, whether the system policy
// and the session's egress policy (api.Policy, from resolve_policy with the run's egress
// inputs) allow what the run asks for: the variables raw_env keeps raw (forbid_raw_env),
// --git-token (forbid_git_token; a permissive profile, which the helper refuses with any
// binding), write-back of refreshed logins wherever it was asked (forbid_login_write_back,
// even for a run without credentials), --ssh-agent (allow_ssh_agent = false), and, with a
// network, every placeholder's hosts (a binding none of whose hosts the policy allows is
// one StartVM refuses). Each refusal is a *RefusedError wrapping api.ErrPolicy that names
// the thing, the rule and the way out; the helper keeps its own checks at StartVM. p is
// the run's Placeholders (nil, or unusable: no placeholders to check).
func (w *Workflow) secretsAllowed(ctx context.Context, hc helperclient.Client, spec RunSpec, p *Placeholders) error {
	if p != nil && (p.Err != nil || !hc.Caps().Secrets) {
		p = nil
	}
	if p == nil && spec.WriteBackAsked == "" && spec.SSHAgent == nil {
		return nil
	}
	pol, err := hc.ResolvePolicy(ctx, spec.VM.PolicyArgs())
	switch {
	case api.IsCode(err, api.CodeUnknownCall):
		return nil // a helper without resolve_policy has no such keys either
	case err != nil:
		return fmt.Errorf("run: ask the helper's policy: %w", err)
	case pol.LoginWriteBackForbidden && spec.WriteBackAsked != "":
		return &RefusedError{fmt.Errorf("%s: %w: the system policy forbids writing refreshed logins back (forbid_login_write_back = true); drop it (brood run --write-back-logins=false overrides the config key)", spec.WriteBackAsked, api.ErrPolicy)}
	case pol.SSHAgentForbidden && spec.SSHAgent != nil:
		return &RefusedError{fmt.Errorf("--ssh-agent: %w: the system policy forbids forwarding the SSH agent (allow_ssh_agent = false); run without --ssh-agent (--git-token gives git a GitHub token instead)", api.ErrPolicy)}
	}
	if p == nil {
		return nil
	}
	return placeholdersAllowed(pol, spec.VM.Egress, p)
}

// placeholdersAllowed is secretsAllowed for the placeholders p under pol, the session's
// policy for network egress ("" or "none": no network, the helper drops the bindings).
func placeholdersAllowed(pol api.Policy, egress string, p *Placeholders) error {
	switch {
	case pol.RawEnvForbidden && len(p.Raw) > 0:
		return &RefusedError{fmt.Errorf("raw_env %s: %w: the system policy forbids raw credentials (forbid_raw_env = true)", strings.Join(p.Raw, ", "), api.ErrPolicy)}
	case pol.GitTokenForbidden && p.Required == "--git-token":
		return &RefusedError{fmt.Errorf("--git-token: %w: the system policy forbids it (forbid_git_token = true)", api.ErrPolicy)}
	case egress == "" || egress == "none" || len(p.Secrets.Bindings) == 0:
		return nil
	case pol.Profile == "permissive" && p.Required == "--git-token":
		return &RefusedError{fmt.Errorf("--git-token: %w: a permissive session's connections do not pass the name gate, so the token could not be kept to its host (use --egress standard, or run without --git-token)", api.ErrPolicy)}
	case pol.Profile == "permissive":
		return &RefusedError{fmt.Errorf("placeholders: %w: a permissive session's connections do not pass the name gate, so no placeholder can be swapped (use --egress standard%s)", api.ErrPolicy, rawEnvWayOut(pol, "$"))}
	}
	for _, b := range p.Secrets.Bindings {
		if len(b.Hosts) == 0 || slices.ContainsFunc(b.Hosts, func(h string) bool { return policyAllows(pol, h) }) {
			continue
		}
		if strings.HasPrefix(b.Name, "git token") { // secrets.NewGitToken's binding
			return &RefusedError{fmt.Errorf("--git-token: %w: the token may go only to %s, which this session's egress policy does not allow (brood run --allow-host %s, or run without --git-token)",
				api.ErrPolicy, strings.Join(b.Hosts, ", "), b.Hosts[0])}
		}
		return &RefusedError{fmt.Errorf("secret %s: %w: its real value may go only to %s, which this session's egress policy does not allow; allow it with brood run --allow-host %s, or allow_hosts = [%q] in the [egress] table of ~/.config/brood/config.toml%s",
			b.Name, api.ErrPolicy, strings.Join(b.Hosts, ", "), b.Hosts[0], b.Hosts[0], rawEnvWayOut(pol, b.Name))}
	}
	return nil
}

// rawEnvWayOut is the raw_env way out of a placeholder refusal for the binding named
// name, when it is a variable ("$NAME") and the system policy allows raw_env ("" else).
func rawEnvWayOut(pol api.Policy, name string) string {
	if pol.RawEnvForbidden || !strings.HasPrefix(name, "$") {
		return ""
	}
	return ", or list the variable in the agent's raw_env (the VM then gets the real value)"
}

// policyAllows reports whether pol lets the session reach host, as the helper's name
// gate decides (netpolicy.Effective.Check): a denial wins, then an exact entry or a
// label-anchored "*.suffix" (never the apex), then the permissive profile.
func policyAllows(pol api.Policy, host string) bool {
	n := strings.TrimSuffix(strings.ToLower(host), ".")
	match := func(pat string) bool {
		if suf, ok := strings.CutPrefix(pat, "*."); ok {
			return strings.HasSuffix(n, "."+suf)
		}
		return n == pat
	}
	for _, d := range pol.Denied {
		if match(d.Pattern) {
			return false
		}
	}
	for _, h := range pol.Hosts {
		if match(h.Name) {
			return true
		}
	}
	return pol.Profile == "permissive"
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
