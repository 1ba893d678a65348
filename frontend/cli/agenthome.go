package cli

import (
	"fmt"
	"io/fs"
	"os"
	"sort"

	"brood.dev/brood/frontend/agentcfg"
	brsecrets "brood.dev/brood/frontend/secrets"
	"brood.dev/brood/sandbox/guestcfg"
)

// agentHome is what a built-in agent's guest home gets (frontend/agentcfg): files, the
// variables to set and the notes for the run output.
type agentHome struct {
	files []guestcfg.HomeFile
	env   [][2]string
	notes []string
	// unset are forwarded variables the agent must not get (hostPathVars).
	unset []string
}

// hostPathVars are variables a built-in agent's forwarding patterns match that name the
// agent's config directory on the host (codex's CODEX_HOME, Claude Code's
// CLAUDE_CONFIG_DIR, opencode's OPENCODE_CONFIG and OPENCODE_CONFIG_DIR): in the VM such
// a path does not exist and would point the agent away from the home brood prepared (a
// forwarded CODEX_HOME brought codex's sign-in screen back), so they are not forwarded.
var hostPathVars = map[string][]string{
	"codex":       {"CODEX_HOME"},
	"claude-code": {"CLAUDE_CONFIG_DIR"},
	"opencode":    {"OPENCODE_CONFIG", "OPENCODE_CONFIG_DIR"},
}

// agentHome builds the guest home of r's agent from environ and the developer's home
// directory: only for built-in agents with a settings table (none for shell, run-image
// and custom agents); --no-settings leaves the host settings unread. A host settings file
// that does not parse is an error naming it.
func (r runRequest) agentHome(environ []string) (agentHome, error) {
	return r.agentHomeOf(environ, nil)
}

// agentHomeOf is agentHome with the login files extra (the host's, with placeholders,
// frontend/secrets) added when the agent has no API key in environ.
func (r runRequest) agentHomeOf(environ []string, extra []guestcfg.HomeFile) (agentHome, error) {
	name := r.agentForPolicy()
	if name == "" || !agentcfg.Known(name) {
		return agentHome{}, nil
	}
	opts := agentcfg.Options{NoSettings: r.flags.noSettings}
	var pre []string
	home, err := os.UserHomeDir()
	if err != nil && !opts.NoSettings {
		pre = append(pre, fmt.Sprintf("settings: not copied: %v", err))
		opts.NoSettings = true
	}
	// The seam where key values would be replaced by placeholders: Build sees only these.
	secrets := agentcfg.Secrets(name, environ)
	if len(secrets) == 0 && len(extra) > 0 {
		opts.LoginFile = "~/" + extra[0].Path
	}
	p, err := agentcfg.Build(name, secrets, home, opts)
	if err != nil {
		return agentHome{}, fmt.Errorf("%w (brood run --no-settings skips the copy)", err)
	}
	if len(secrets) == 0 && len(extra) == 0 && !opts.NoSettings {
		if n := brsecrets.LoginSkipped(home, name); n != "" {
			pre = append(pre, n)
		}
	}
	h := agentHome{env: p.Env, notes: append(pre, p.Notes...), unset: hostPathVars[name]}
	for _, v := range h.unset {
		if os.Getenv(v) != "" && envMatch(r.agent.Env, v) {
			h.notes = append(h.notes, fmt.Sprintf("settings: $%s not forwarded: it names a host directory; in the VM %s uses its default under $HOME", v, name))
		}
	}
	for _, f := range p.Files {
		h.files = append(h.files, guestcfg.HomeFile{Path: f.Path, Mode: uint32(f.Mode & fs.ModePerm), Data: f.Data})
	}
	if len(secrets) == 0 {
		h.files = append(h.files, extra...)
	}
	return h.withTestCA() // testca.go: a no-op outside the end-to-end tests' build
}

// withEnv returns forwarded without h.unset and with h's variables set (h's value wins
// for a name in both), sorted by name.
func (h agentHome) withEnv(forwarded [][2]string) [][2]string {
	vals := map[string]string{}
	for _, kv := range forwarded {
		vals[kv[0]] = kv[1]
	}
	for _, n := range h.unset {
		delete(vals, n)
	}
	for _, kv := range h.env {
		vals[kv[0]] = kv[1]
	}
	out := make([][2]string, 0, len(vals))
	for n, v := range vals {
		out = append(out, [2]string{n, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}
