package netpolicy

import (
	"fmt"
	"net/url"
	"slices"
)

// agentHosts are the LLM provider API hosts of the agents brood knows (the built-in
// agents of `brood run`, frontend/cli/agents.go). The helper takes an agent's hosts from this
// table or its own configuration, never from the client, which could otherwise name any
// host as its "provider".
var agentHosts = map[string][]string{
	"claude-code": {"api.anthropic.com"},
	"codex":       {"api.openai.com"},
	"opencode":    {"api.anthropic.com", "api.openai.com", "openrouter.ai"},
	"gemini":      {"generativelanguage.googleapis.com"},
	"hermes":      {"inference-api.nousresearch.com", "openrouter.ai", "api.openai.com"},
	"shell":       {},
}

// BuiltinAgentHosts returns the provider hosts of a built-in agent (443/tcp each), and
// whether agent is one. An unknown agent has none: under Locked it reaches nothing.
func BuiltinAgentHosts(agent string) ([]string, bool) {
	h, ok := agentHosts[agent]
	return slices.Clone(h), ok
}

// Login is one sign-in (OAuth login) a built-in agent can be given from the developer's
// login file on the host: where its tokens may go. Its hosts are allowed (443/tcp, as the
// agent's own, LayerAgent) only for a session that forwards the login (Inputs.Logins),
// and a system policy denial still removes them.
type Login struct {
	// Name identifies the login: the api.SecretBinding Login of its tokens ("codex",
	// "claude", "gemini", "opencode-openai", "opencode-anthropic").
	Name string
	// Provider names whose account it is ("openai", "anthropic", "google").
	Provider string
	// Access are the hosts that receive the access token (and an ID token).
	Access []string
	// TokenURLs are the OAuth token endpoints (https://HOST/PATH) that receive the
	// refresh token.
	TokenURLs []string
}

// Hosts returns the login's hosts: Access, then the hosts of TokenURLs, without
// duplicates.
func (l Login) Hosts() []string {
	out := slices.Clone(l.Access)
	for _, t := range l.TokenURLs {
		if u, err := url.Parse(t); err == nil && !slices.Contains(out, u.Hostname()) {
			out = append(out, u.Hostname())
		}
	}
	return out
}

// The logins' hosts, as each CLI of the images brood builds uses them in its sign-in
// mode:
//   - codex (ChatGPT sign-in): the Responses API under https://chatgpt.com/backend-api/codex
//     with the access token as Bearer; refresh at https://auth.openai.com/oauth/token
//     (codex-rs login/src/auth/manager.rs: DEFAULT_CHATGPT_BACKEND_BASE_URL,
//     REFRESH_TOKEN_URL).
//   - Claude Code (Claude.ai sign-in): the Messages API at api.anthropic.com with the
//     access token as Bearer; refresh at https://platform.claude.com/v1/oauth/token (its
//     OAuth config TOKEN_URL; 2.1 no longer names console.anthropic.com).
//   - gemini-cli (oauth-personal): the Code Assist API at cloudcode-pa.googleapis.com;
//     at start it checks the access token at https://oauth2.googleapis.com/tokeninfo
//     (Bearer, google-auth-library getTokenInfo) and refreshes at
//     https://oauth2.googleapis.com/token (gemini-cli code_assist/oauth2.ts).
//   - opencode's "openai" OAuth entry (ChatGPT Pro/Plus): chatgpt.com/backend-api/codex,
//     refresh at https://auth.openai.com/oauth/token; its "anthropic" OAuth entry (the
//     opencode-anthropic-auth plugin): api.anthropic.com, refresh at
//     https://console.anthropic.com/v1/oauth/token.
var (
	codexLogin    = Login{Name: "codex", Provider: "openai", Access: []string{"chatgpt.com"}, TokenURLs: []string{"https://auth.openai.com/oauth/token"}}
	claudeLogin   = Login{Name: "claude", Provider: "anthropic", Access: []string{"api.anthropic.com"}, TokenURLs: []string{"https://platform.claude.com/v1/oauth/token"}}
	geminiLogin   = Login{Name: "gemini", Provider: "google", Access: []string{"cloudcode-pa.googleapis.com", "oauth2.googleapis.com"}, TokenURLs: []string{"https://oauth2.googleapis.com/token"}}
	opencodeLogin = []Login{
		{Name: "opencode-openai", Provider: "openai", Access: []string{"chatgpt.com"}, TokenURLs: []string{"https://auth.openai.com/oauth/token"}},
		{Name: "opencode-anthropic", Provider: "anthropic", Access: []string{"api.anthropic.com"}, TokenURLs: []string{"https://console.anthropic.com/v1/oauth/token"}},
	}
)

// agentLogins are the logins of each built-in agent that has a login file.
var agentLogins = map[string][]Login{
	"codex":       {codexLogin},
	"claude-code": {claudeLogin},
	"gemini":      {geminiLogin},
	"opencode":    opencodeLogin,
}

// BuiltinLogins returns the logins a built-in agent can be given (none for an agent
// without a login file).
func BuiltinLogins(agent string) []Login {
	out := slices.Clone(agentLogins[agent])
	for i := range out {
		out[i].Access, out[i].TokenURLs = slices.Clone(out[i].Access), slices.Clone(out[i].TokenURLs)
	}
	return out
}

// BuiltinLogin returns agent's login named name, or an error wrapping ErrUnknownLogin.
func BuiltinLogin(agent, name string) (Login, error) {
	for _, l := range BuiltinLogins(agent) {
		if l.Name == name {
			return l, nil
		}
	}
	return Login{}, fmt.Errorf("login %q of agent %q: %w", name, agent, ErrUnknownLogin)
}
