// Package secrets decides which credentials of the developer a session's agent may use and
// replaces every one of them by a placeholder before anything reaches the guest: the
// agent's API-key variables, the credential-looking variables a custom agent forwards
// (*_API_KEY, *_TOKEN, *_SECRET, *_PASSWORD, the known provider names), the tokens of the
// agent's own login file on the host (~/.codex/auth.json, ~/.claude/.credentials.json,
// ~/.gemini/oauth_creds.json, ~/.local/share/opencode/auth.json) and, with --git-token, a
// git token for the allowed code hosts.
//
// Each real value gets a per-session random placeholder of the same shape (the prefix a
// CLI checks, such as "sk-proj-" or "AIza", the length, and for a JWT its header and
// claims), and a binding (api.SecretBinding) to the hosts that may receive it: the
// provider's hosts by default, the agent's configuration may name others, the system
// policy can only take hosts away. Discover returns the guest side (variables and files
// holding placeholders only) and the bindings, which carry the real values to the egress
// process and nowhere else: nothing in this package logs a value, and the one file it
// writes is a host login file the developer asked brood to update
// (Login.WriteBack, brood run --write-back-logins: the OAuth tokens the session
// refreshed, written only over an unchanged file).
//
// A variable named in raw_env reaches the guest as it is, unless the system policy
// forbids raw values (Policy.ForbidRawEnv).
//
// Privilege: none; it runs in brood as the developer, reads the developer's environment
// and login files, and runs `gh auth token` through internal/hostexec.
package secrets
