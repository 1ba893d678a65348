// Package agentcfg says what the guest home of a built-in agent (codex, claude-code,
// opencode, gemini, hermes) must hold so that the agent starts working with nothing but
// `brood run AGENT`: the developer's API key made the one the agent uses, through the
// setting each CLI documents (so no interactive sign-in appears), and the developer's own
// settings copied from the host home minus everything that names a host path or a host
// command the guest cannot use (MCP servers, hooks, status-line and notify programs, key
// helpers). It returns a Plan: files relative to the guest's $HOME with their modes, the
// environment to add, and notes for the run output; it writes nothing.
//
// Every key value passes through one type, Secret: Build reads the values only from the
// Secrets it is given, so a caller can replace Value by a placeholder of the same shape
// before the plan is built and no generated file or variable holds the real value.
//
// The host files are the developer's own, not the hostile workspace, but they are still
// read strictly: each agent's config directory is opened as an os.Root, so a symlink that
// points out of it is refused (the file is skipped with a note); only regular files of at
// most MaxFileSize bytes are read; JSON and TOML are decoded in full and a malformed file
// is an error naming it (the run stops rather than starting the agent without settings the
// developer relies on, such as permission deny lists; `--no-settings` skips the copy).
// Credential files (~/.codex/auth.json, ~/.claude/.credentials.json, gemini's
// oauth_creds.json, opencode's auth.json) are never read.
//
// Privilege: none; it runs in brood as the developer and only reads the developer's home.
package agentcfg
