package secrets

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/placeholder"
)

// GitToken is what --git-token gives the guest: git configuration, as GIT_CONFIG_COUNT
// variables (git-config(1) "ENVIRONMENT"), that makes a credential helper answer the
// placeholder for each allowed code host, and the binding of the real token to those
// hosts.
type GitToken struct {
	Env     [][2]string
	Binding api.SecretBinding
	Notes   []string
}

// GitTokenSource returns the developer's git token: from environ's GH_TOKEN, else
// GITHUB_TOKEN, else run (nil: none), which stands for `gh auth token` run through
// internal/hostexec. It returns "" when there is none.
func GitTokenSource(ctx context.Context, environ []string, run func(context.Context) (string, error)) (token, from string, err error) {
	for _, n := range []string{"GH_TOKEN", "GITHUB_TOKEN"} {
		for _, kv := range environ {
			if v, ok := strings.CutPrefix(kv, n+"="); ok && v != "" {
				return v, "$" + n, nil
			}
		}
	}
	if run == nil {
		return "", "", nil
	}
	t, err := run(ctx)
	if err != nil {
		return "", "", fmt.Errorf("read the git token with gh auth token: %w", err)
	}
	return strings.TrimSpace(t), "gh auth token", nil
}

// NewGitToken returns the guest configuration for the real token token (read by
// GitTokenSource, described by from) and the code hosts hosts (the policy's allowed ones,
// e.g. github.com). It returns ErrForbidden when the policy forbids --git-token, and an
// error when token is empty or no host is left after the policy's DenyHosts.
//
// Each host gets `credential.https://HOST.helper`: first an empty value (git-config(1):
// it resets the helper list, so no helper of the image runs), then a shell helper that
// answers `get` with username x-access-token and the placeholder as the password. git
// then sends it as HTTP Basic credentials, which the egress process swaps.
func NewGitToken(token, from string, hosts []string, pol Policy) (GitToken, error) {
	if pol.ForbidGitToken {
		return GitToken{}, fmt.Errorf("--git-token: %w", ErrForbidden)
	}
	if token == "" {
		return GitToken{}, fmt.Errorf("--git-token: no token (set GH_TOKEN or sign in with gh)")
	}
	d := &discovery{in: Input{Policy: pol}}
	hosts = d.narrow(hosts)
	if len(hosts) == 0 {
		return GitToken{}, fmt.Errorf("--git-token: no code host left after the system policy")
	}
	sort.Strings(hosts)
	p := placeholder.New(token)
	g := GitToken{Binding: api.SecretBinding{Name: "git token (" + from + ")", Placeholder: p, Value: token, Hosts: hosts}}
	helper := `!f() { test "$1" = get && printf 'username=x-access-token\npassword=%s\n' ` + p + `; }; f`
	var n int
	for _, h := range hosts {
		for _, v := range []string{"", helper} {
			g.Env = append(g.Env,
				[2]string{"GIT_CONFIG_KEY_" + strconv.Itoa(n), "credential.https://" + h + ".helper"},
				[2]string{"GIT_CONFIG_VALUE_" + strconv.Itoa(n), v})
			n++
		}
	}
	g.Env = append(g.Env, [2]string{"GIT_CONFIG_COUNT", strconv.Itoa(n)})
	g.Notes = append(g.Notes, fmt.Sprintf("secrets: git token (%s) is a placeholder; the real token goes only to %s", from, strings.Join(hosts, ", ")))
	return g, nil
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
