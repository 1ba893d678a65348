package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/agentcfg"
	"brood.dev/brood/frontend/secrets"
	"brood.dev/brood/internal/hostexec"
	"brood.dev/brood/sandbox/guestcfg"
)

// gitTokenHosts are the code hosts --git-token's placeholder is answered for: the
// token comes from GitHub's CLI or GH_TOKEN/GITHUB_TOKEN, so it is GitHub's.
var gitTokenHosts = []string{"github.com"}

// placeholders returns the run with every credential a placeholder (frontend/secrets):
// the forwarded variables, the built-in agent's generated settings built from the
// placeholder values, its host login file with placeholders (when it has no API key),
// and with --git-token git's credential configuration; nil when the run has no
// credential. The run uses it only with a helper that swaps placeholders
// (frontend.RunSpec.Placeholders); --git-token needs one (Placeholders.Required). An error
// making them is returned in Placeholders.Err, so that it stops only a run that uses
// them; the error returned is --git-token's.
func (r runRequest) placeholders(ctx context.Context, environ []string, forwarded [][2]string) (*frontend.Placeholders, error) {
	p, err := r.makePlaceholders(ctx, environ, forwarded)
	if err != nil && !r.flags.gitToken {
		return &frontend.Placeholders{Err: err}, nil
	}
	return p, err
}

func (r runRequest) makePlaceholders(ctx context.Context, environ []string, forwarded [][2]string) (*frontend.Placeholders, error) {
	name := r.agentForPolicy()
	in := secrets.Input{Agent: name, Builtin: agentcfg.Known(name), Forwarded: forwarded,
		RawEnv: r.agent.RawEnv, Hosts: r.agent.SecretHosts}
	if !r.flags.noSettings && len(agentcfg.Secrets(name, environ)) == 0 {
		in.Home, _ = os.UserHomeDir() // the login file, read only when no key takes precedence
	}
	res, err := secrets.Discover(in)
	if inner := errors.Unwrap(err); inner != nil && name == "" {
		err = fmt.Errorf("secrets of agent %s: %w", r.agent.Name, inner) // a custom agent: Discover knows no name
	}
	if err != nil {
		return nil, err
	}
	var logins []guestcfg.HomeFile
	for _, f := range res.Files {
		logins = append(logins, guestcfg.HomeFile{Path: f.Path, Mode: uint32(f.Mode & fs.ModePerm), Data: f.Data})
	}
	home, err := r.agentHomeOf(withValues(environ, res.Env), logins)
	if err != nil {
		return nil, fmt.Errorf("%w (brood run --no-settings skips the copy)", err)
	}
	p := &frontend.Placeholders{Env: home.withEnv(res.Env), HomeFiles: home.files,
		Notes: append(home.notes, res.Notes...), Secrets: res.Secrets, Raw: res.Raw, LoginNames: res.LoginNames,
		WriteBackLogins: r.writeBackAsked() != ""}
	for _, l := range res.Logins {
		p.Logins = append(p.Logins, frontend.LoginFile{Show: l.Show, WriteBack: l.WriteBack})
	}
	if r.flags.gitToken {
		tok, from, err := secrets.GitTokenSource(ctx, environ, ghAuthToken)
		if err != nil {
			return nil, fmt.Errorf("--git-token: no token in $GH_TOKEN or $GITHUB_TOKEN, and %w (sign in with gh auth login, or set GH_TOKEN)", err)
		}
		g, err := secrets.NewGitToken(tok, from, gitTokenHosts, secrets.Policy{})
		if err != nil {
			return nil, err
		}
		p.Env = append(p.Env, g.Env...)
		p.Notes = append(p.Notes, g.Notes...)
		p.Secrets.Bindings = append(p.Secrets.Bindings, g.Binding)
		p.Required = "--git-token"
	}
	if len(p.Secrets.Bindings) == 0 && len(p.Raw) == 0 {
		return nil, nil
	}
	return p, p.Secrets.Validate()
}

// runLogins returns the logins `brood run` forwards for agent with environ, which the
// helper allows the hosts of: those of the agent's host login file (secrets.Discover's
// Result.LoginNames), read only when no API key of the agent is in environ, as
// makePlaceholders reads it. A login file that cannot be read or parsed forwards none.
func runLogins(agent string, environ []string) []string {
	if !agentcfg.Known(agent) || len(agentcfg.Secrets(agent, environ)) > 0 {
		return nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return nil
	}
	res, err := secrets.Discover(secrets.Input{Agent: agent, Builtin: true, Home: home})
	if err != nil {
		return nil
	}
	return res.LoginNames
}

// writeBackAsked names where writing refreshed logins back was asked for: the flag
// ("--write-back-logins"), else the user config's [secrets] write_back_logins; empty when
// neither asks or an explicit --write-back-logins=false turns the config key off.
func (r runRequest) writeBackAsked() string {
	switch {
	case r.flags.writeBackSet || r.flags.writeBack:
		if r.flags.writeBack {
			return "--write-back-logins"
		}
		return ""
	case r.user != nil && r.user.Secrets.WriteBackLogins:
		path, err := userConfigPath()
		if err != nil {
			path = "the user config"
		}
		return "write_back_logins in " + tildePath(path)
	}
	return ""
}

// tildePath is path with the home directory shown as "~" (path itself elsewhere).
func tildePath(path string) string {
	home, err := os.UserHomeDir()
	if rest, ok := strings.CutPrefix(path, home+"/"); err == nil && home != "" && ok {
		return "~/" + rest
	}
	return path
}

// withValues returns environ ("NAME=value") with the values of set in place of those of
// the same names.
func withValues(environ []string, set [][2]string) []string {
	vals := map[string]string{}
	for _, kv := range set {
		vals[kv[0]] = kv[1]
	}
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		n, _, _ := strings.Cut(kv, "=")
		if v, ok := vals[n]; ok {
			kv = n + "=" + v
		}
		out = append(out, kv)
	}
	return out
}

// ghAuthToken runs `gh auth token` (GitHub's CLI prints the token of its signed-in
// account) through internal/hostexec.
func ghAuthToken(ctx context.Context) (string, error) {
	cmd, err := hostexec.Command(ctx, "gh", "auth", "token")
	if err != nil {
		return "", err
	}
	out, err := cmd.Output()
	if err != nil {
		return "", err
	}
	return string(out), nil
}
