package agentcfg

import (
	"fmt"

	"github.com/pelletier/go-toml/v2"
)

// Why an item of a host settings file is dropped (the notes say it).
const (
	whyCommand = "runs a host command"
	whyPath    = "names host paths"
	whyLogin   = "brood sets the login"
	whyKey     = "holds a key; credentials are not copied"
	whyGuest   = "brood sets it for the VM"
)

// setEnv adds each secret to the plan's environment under its own name, so that the
// variables the agent reads carry Secret.Value (a placeholder, once values are replaced).
func (b *builder) setEnv() {
	for _, s := range b.secrets {
		b.plan.Env = append(b.plan.Env, [2]string{s.Name, s.Value})
	}
}

// buildCodex: codex reads its login from ~/.codex/auth.json, the file `codex login
// --with-api-key` writes ({"auth_mode": "apikey", "OPENAI_API_KEY": KEY}), and
// `forced_login_method = "api"` in ~/.codex/config.toml makes it skip the "Sign in with
// ChatGPT" choice (openai/codex docs/authentication.md, config reference). The host
// config.toml is copied without mcp_servers (commands), notify (a program), projects,
// writable_roots and instruction-file paths (host paths) and its own login settings. The
// generated config.toml always sets features.daemon_auto_start = false (codex 0.171's TUI
// otherwise copies itself into ~/.codex/packages and runs an app-server daemon from
// there) and trusts GuestWorkspace (projects."/workspace".trust_level = "trusted", what
// its "Trust this folder?" screen writes).
func buildCodex(b *builder) error {
	const dir, file = ".codex", "~/.codex/config.toml"
	cfg, err := b.readTOML(dir, "config.toml")
	if err != nil {
		return err
	}
	if cfg != nil {
		b.drop(cfg, file, whyCommand, "mcp_servers")
		b.drop(cfg, file, whyCommand, "notify")
		b.drop(cfg, file, whyCommand, "hooks")
		b.drop(cfg, file, whyPath, "projects")
		b.drop(cfg, file, whyPath, "sandbox_workspace_write", "writable_roots")
		b.drop(cfg, file, whyPath, "experimental_instructions_file")
		b.drop(cfg, file, whyPath, "model_instructions_file")
		b.drop(cfg, file, whyLogin, "cli_auth_credentials_store")
		b.drop(cfg, file, whyLogin, "preferred_auth_method")
		b.drop(cfg, file, whyLogin, "forced_login_method")
	}
	if cfg == nil {
		cfg = map[string]any{}
	}
	// The guest's own settings, whatever the host's say: the TUI must not install its
	// app-server daemon (a 424 MB copy of the binary in ~/.codex/packages, in a home that is
	// RAM: under 1 GiB the TUI never finished loading) and trusts the workspace (its
	// "Trust this folder?" screen at every start otherwise: the home is new each run).
	b.drop(cfg, file, whyGuest, "features", "daemon_auto_start")
	set(cfg, false, "features", "daemon_auto_start")
	set(cfg, "trusted", "projects", GuestWorkspace, "trust_level")
	b.note("settings: codex runs without its app-server daemon and trusts %s (~/.codex/config.toml)", GuestWorkspace)
	if s, ok := b.secret("OPENAI_API_KEY", "CODEX_API_KEY"); ok {
		cfg["forced_login_method"] = "api"
		if err := b.addJSON(".codex/auth.json", 0o600, map[string]any{"auth_mode": "apikey", "OPENAI_API_KEY": s.Value}); err != nil {
			return err
		}
		b.note("login: $%s is codex's API key (~/.codex/auth.json, forced_login_method = \"api\")", s.Name)
	} else {
		b.noKey("OPENAI_API_KEY", "codex")
	}
	data, err := toml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encode %s: %w", file, err)
	}
	b.add(".codex/config.toml", 0o600, data)
	b.setEnv()
	return b.copyText(dir, "AGENTS.md")
}

// buildClaude: Claude Code uses $ANTHROPIC_API_KEY, but interactively asks once whether to
// use a key it has not seen and runs its first-start onboarding; ~/.claude.json with
// hasCompletedOnboarding and the key's last 20 characters in
// customApiKeyResponses.approved answers both (the file Claude Code itself writes after
// those prompts). The host ~/.claude.json (project history, host paths, the account) is
// never copied. ~/.claude/settings.json is copied without hooks, statusLine, apiKeyHelper,
// the AWS and OTEL helper commands, mcpServers and permissions.additionalDirectories.
func buildClaude(b *builder) error {
	const dir, file = ".claude", "~/.claude/settings.json"
	state := map[string]any{"hasCompletedOnboarding": true}
	if s, ok := b.secret("ANTHROPIC_API_KEY"); ok {
		tail := s.Value
		if len(tail) > 20 {
			tail = tail[len(tail)-20:]
		}
		state["customApiKeyResponses"] = map[string]any{"approved": []string{tail}, "rejected": []string{}}
		b.note("login: $%s is Claude Code's API key (approved in ~/.claude.json)", s.Name)
	} else {
		b.noKey("ANTHROPIC_API_KEY", "Claude Code")
	}
	if err := b.addJSON(".claude.json", 0o600, state); err != nil {
		return err
	}
	cfg, err := b.readJSON(dir, "settings.json")
	if err != nil {
		return err
	}
	if cfg != nil {
		for _, k := range []string{"hooks", "statusLine", "apiKeyHelper", "awsAuthRefresh", "awsCredentialExport", "otelHeadersHelper", "mcpServers"} {
			b.drop(cfg, file, whyCommand, k)
		}
		b.drop(cfg, file, whyPath, "permissions", "additionalDirectories")
		if err := b.addJSON(".claude/settings.json", 0o600, cfg); err != nil {
			return err
		}
	}
	b.setEnv()
	return b.copyText(dir, "CLAUDE.md")
}

// GuestWorkspace is where the workspace is in the guest (brood-guest mounts the
// session's share there: sandbox/guest.Workspace).
const GuestWorkspace = "/workspace"

// buildGemini: the Gemini CLI takes $GEMINI_API_KEY once its auth type is
// "gemini-api-key", set in ~/.gemini/settings.json as security.auth.selectedType (the
// settings format of gemini-cli 0.3 and later) or selectedAuthType (the earlier flat
// format, kept when the host file uses it). $GOOGLE_API_KEY alone is Vertex AI's key:
// auth type "vertex-ai" with GOOGLE_GENAI_USE_VERTEXAI=true (gemini-cli
// docs/get-started/authentication.md). The host settings are copied without mcpServers,
// hooks, the tool discovery and call commands and includeDirectories.
// ~/.gemini/trustedFolders.json trusts GuestWorkspace ({"/workspace": "TRUST_FOLDER"}, the
// file and value the CLI's trust dialog writes): the Gemini CLI 0.61 refuses to run
// headless (`gemini -p`, exit 55) in a folder not trusted, and asks interactively. The
// VM is where brood confines the workspace; the host's own trust list (host paths) is
// never copied.
func buildGemini(b *builder) error {
	if err := b.addJSON(".gemini/trustedFolders.json", 0o600, map[string]any{GuestWorkspace: "TRUST_FOLDER"}); err != nil {
		return err
	}
	b.note("settings: the Gemini CLI trusts %s (~/.gemini/trustedFolders.json)", GuestWorkspace)
	const dir, file = ".gemini", "~/.gemini/settings.json"
	cfg, err := b.readJSON(dir, "settings.json")
	if err != nil {
		return err
	}
	if cfg != nil {
		b.drop(cfg, file, whyCommand, "mcpServers")
		b.drop(cfg, file, whyCommand, "hooks")
		b.drop(cfg, file, whyCommand, "tools", "discoveryCommand")
		b.drop(cfg, file, whyCommand, "tools", "callCommand")
		b.drop(cfg, file, whyCommand, "toolDiscoveryCommand")
		b.drop(cfg, file, whyCommand, "toolCallCommand")
		b.drop(cfg, file, whyPath, "context", "includeDirectories")
		b.drop(cfg, file, whyPath, "includeDirectories")
	}
	authType := ""
	if s, ok := b.secret("GEMINI_API_KEY"); ok {
		authType = "gemini-api-key"
		b.note("login: $%s is the Gemini CLI's API key (auth type gemini-api-key)", s.Name)
	} else if s, ok := b.secret("GOOGLE_API_KEY"); ok {
		authType = "vertex-ai"
		b.plan.Env = append(b.plan.Env, [2]string{"GOOGLE_GENAI_USE_VERTEXAI", "true"})
		b.note("login: $%s is the Gemini CLI's Vertex AI key (auth type vertex-ai; set GEMINI_API_KEY for the Gemini API)", s.Name)
	} else {
		b.noKey("GEMINI_API_KEY", "the Gemini CLI")
	}
	if authType != "" {
		if cfg == nil {
			cfg = map[string]any{}
		}
		if _, flat := cfg["selectedAuthType"]; flat {
			cfg["selectedAuthType"] = authType
		} else {
			set(cfg, authType, "security", "auth", "selectedType")
		}
	}
	if cfg != nil {
		if err := b.addJSON(".gemini/settings.json", 0o600, cfg); err != nil {
			return err
		}
	}
	b.setEnv()
	return b.copyText(dir, "GEMINI.md")
}

// buildOpencode: opencode takes each provider's key from the provider's environment
// variable (ANTHROPIC_API_KEY, OPENAI_API_KEY, OPENROUTER_API_KEY: the models.dev
// provider table it uses), so no file is needed for the login. ~/.config/opencode/
// opencode.json is copied without mcp (servers), plugin (host packages and paths), lsp and
// formatter (commands) and any provider's options.apiKey.
func buildOpencode(b *builder) error {
	const dir, file = ".config/opencode", "~/.config/opencode/opencode.json"
	cfg, err := b.readJSON(dir, "opencode.json")
	if err != nil {
		return err
	}
	if cfg != nil {
		b.drop(cfg, file, whyCommand, "mcp")
		b.drop(cfg, file, whyPath, "plugin")
		b.drop(cfg, file, whyCommand, "lsp")
		b.drop(cfg, file, whyCommand, "formatter")
		b.dropEach(cfg, file, whyKey, []string{"options", "apiKey"}, "provider")
		if err := b.addJSON(".config/opencode/opencode.json", 0o600, cfg); err != nil {
			return err
		}
	}
	b.keyNotes("opencode", "ANTHROPIC_API_KEY, OPENAI_API_KEY or OPENROUTER_API_KEY")
	b.setEnv()
	return nil
}

// buildHermes: hermes reads its provider keys from the environment (NOUS_API_KEY,
// OPENROUTER_API_KEY, OPENAI_API_KEY); its settings (~/.hermes) are not copied.
func buildHermes(b *builder) error {
	b.keyNotes("hermes", "NOUS_API_KEY, OPENROUTER_API_KEY or OPENAI_API_KEY")
	b.setEnv()
	return nil
}

// keyNotes notes which environment keys an agent that reads them directly gets.
func (b *builder) keyNotes(agent, keys string) {
	if len(b.secrets) == 0 {
		b.note("login: no provider key (%s) in the environment: %s will ask for one", keys, agent)
		return
	}
	for _, s := range b.secrets {
		b.note("login: $%s reaches %s in its environment", s.Name, agent)
	}
}
