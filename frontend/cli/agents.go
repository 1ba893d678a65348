package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"brood.dev/brood/netpolicy"
)

// Agent is what `brood run AGENT` starts in the VM: the command, the image it runs on,
// and which of the developer's environment variables reach it.
type Agent struct {
	Name string
	// Image is the default rootfs image (api.ValidImageName); --image overrides it.
	Image string
	// Command is the agent's argv; empty means a login shell (the SSH "shell" request).
	Command []string
	// Env lists the names of the developer's environment variables forwarded to the
	// agent (SSH "env" requests): an exact name ("OPENAI_API_KEY") or a prefix ending in
	// '*' ("CODEX_*"). Nothing else is forwarded.
	Env []string
	// Source says where the definition came from: "built-in" or the config file path.
	Source string
	// RawEnv names forwarded credential variables that reach the guest as they are, not
	// as placeholders; SecretHosts the hosts each named variable's value may be sent to
	// (frontend/secrets). Custom agents only.
	RawEnv      []string
	SecretHosts map[string][]string
}

// builtinAgents are the agents brood knows without configuration. Images other than
// `test` and `codex` are built by their own recipes (`sudo broodd-helper image build NAME`).
var builtinAgents = map[string]Agent{
	"claude-code": {Image: "claude-code", Command: []string{"claude"},
		Env: []string{"ANTHROPIC_API_KEY", "ANTHROPIC_*", "CLAUDE_*"}},
	"codex": {Image: "codex", Command: []string{"codex"},
		Env: []string{"OPENAI_API_KEY", "OPENAI_*", "CODEX_*"}},
	"opencode": {Image: "opencode", Command: []string{"opencode"},
		Env: []string{"OPENCODE_*", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY"}},
	"gemini": {Image: "gemini", Command: []string{"gemini"},
		Env: []string{"GEMINI_API_KEY", "GEMINI_*", "GOOGLE_*"}},
	"hermes": {Image: "hermes", Command: []string{"hermes"},
		Env: []string{"HERMES_*", "NOUS_API_KEY", "OPENROUTER_API_KEY", "OPENAI_API_KEY"}},
	// shell runs the image's login shell; the `test` image (busybox, git, sh) is the one
	// every installation has.
	"shell": {Image: "test"},
}

// userConfig is the user's config.toml ($XDG_CONFIG_HOME/brood/config.toml). Decoding is
// strict: an unknown key is an error, so a typo never silently drops a setting.
//
//	[agents.aider]
//	image = "codex"
//	command = ["aider", "--yes"]
//	env = ["OPENAI_API_KEY", "AIDER_*"]
type userConfig struct {
	Agents map[string]configAgent `toml:"agents"`
	// Egress is the user layer of the egress policy (it can only tighten what the system
	// policy allows); egress is the same table parsed, by loadUserConfig.
	Egress netpolicy.ConfigFile `toml:"egress"`
	egress netpolicy.LayerConfig
	// Secrets is the [secrets] table: write_back_logins = true is --write-back-logins
	// for every run (docs/secrets.md).
	Secrets struct {
		WriteBackLogins bool `toml:"write_back_logins"`
	} `toml:"secrets"`
}

type configAgent struct {
	Image       string              `toml:"image"`
	Command     []string            `toml:"command"`
	Env         []string            `toml:"env"`
	RawEnv      []string            `toml:"raw_env"`
	SecretHosts map[string][]string `toml:"secret_hosts"`
}

// agentNameRe is the form of an agent name (built-in or custom).
var agentNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// envPatternRe is one forwarding pattern: a variable name, optionally ending in '*'
// after at least one character (a bare "*" would forward everything).
var envPatternRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\*?$`)

// userConfigPath returns $XDG_CONFIG_HOME/brood/config.toml, else
// ~/.config/brood/config.toml.
func userConfigPath() (string, error) {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "brood", "config.toml"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find user config: %w", err)
	}
	return filepath.Join(home, ".config", "brood", "config.toml"), nil
}

// loadUserConfig reads and converts the user config at path, once per command; a
// missing file is an empty config. Errors wrap ErrConfig.
func loadUserConfig(path string) (*userConfig, error) {
	var c userConfig
	if err := readConfigFile(path, &c); err != nil {
		return nil, err
	}
	for name, a := range c.Agents {
		if err := checkAgent(name, a); err != nil {
			return nil, fmt.Errorf("config %s: agent %q: %w: %w", path, name, ErrConfig, err)
		}
	}
	l, err := c.Egress.Parse()
	if err != nil {
		return nil, fmt.Errorf("config %s [egress]: %w: %w", path, ErrConfig, err)
	}
	c.egress = l
	return &c, nil
}

// workspaceConfig is a workspace's .brood.toml (workspaceConfigName), decoded as
// strictly as the user config:
//
//	[egress]
//	profile    = "locked"            # may tighten, never loosen
//	deny_hosts = ["*.paste.example"] # a workspace may remove hosts, never add them
type workspaceConfig struct {
	Egress netpolicy.ConfigFile  `toml:"egress"`
	egress netpolicy.LayerConfig // Egress parsed, by loadWorkspaceConfig
}

// workspaceConfigName is the workspace's own brood configuration file.
const workspaceConfigName = ".brood.toml"

// loadWorkspaceConfig reads and converts workspace's .brood.toml, once per command; a
// missing file is an empty config. Errors wrap ErrConfig.
func loadWorkspaceConfig(workspace string) (*workspaceConfig, error) {
	path := filepath.Join(workspace, workspaceConfigName)
	var c workspaceConfig
	// The repository chose this file: never through a link (it could name any file of the
	// developer's, and a parse error would print its lines), never a FIFO, at most 1 MiB.
	data, err := netpolicy.ReadWorkspaceFile(workspace, workspaceConfigName, netpolicy.MaxWorkspaceFileBytes)
	if errors.Is(err, os.ErrNotExist) {
		return &c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w: %w", ErrConfig, err)
	}
	if err := decodeConfig(path, data, &c); err != nil {
		return nil, err
	}
	l, err := c.Egress.Parse()
	if err != nil {
		return nil, fmt.Errorf("config %s [egress]: %w: %w", path, ErrConfig, err)
	}
	c.egress = l
	return &c, nil
}

// readConfigFile decodes the TOML file at path into v, strictly: an unknown key is an
// error naming the file and each unknown key with its line and column. A missing file
// leaves v unchanged. Decode errors wrap ErrConfig.
func readConfigFile(path string, v any) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read config %s: %w", path, err)
	}
	return decodeConfig(path, data, v)
}

// decodeConfig decodes data, the TOML file at path, into v strictly (unknown keys are
// errors naming each key with its line and column). Errors wrap ErrConfig.
func decodeConfig(path string, data []byte, v any) error {
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var strict *toml.StrictMissingError
		if errors.As(err, &strict) {
			// Name the unknown keys (line, column and key), not just "missing fields".
			// go-toml marks a table v's type lacks "missing table": to the user it is a
			// table this file may not hold.
			msg := strings.ReplaceAll(strings.TrimSpace(strict.String()), "missing table", "table unknown or not allowed here")
			return fmt.Errorf("parse config %s: %w: unknown keys:\n%s", path, ErrConfig, msg)
		}
		return fmt.Errorf("parse config %s: %w: %w", path, ErrConfig, err)
	}
	return nil
}

// checkAgent validates one custom agent definition.
func checkAgent(name string, a configAgent) error {
	if !agentNameRe.MatchString(name) {
		return fmt.Errorf("name must match %s", agentNameRe)
	}
	if _, err := storeImage("image", a.Image); err != nil { // imageref.go
		return err
	}
	if len(a.Command) == 0 || a.Command[0] == "" {
		return errors.New("command is empty")
	}
	for _, p := range a.Env {
		if !envPatternRe.MatchString(p) {
			return fmt.Errorf("env pattern %q is not NAME or PREFIX*", p)
		}
	}
	for _, n := range a.RawEnv {
		if !envPatternRe.MatchString(n) || strings.HasSuffix(n, "*") {
			return fmt.Errorf("raw_env %q is not a variable name", n)
		}
	}
	for n := range a.SecretHosts { // the hosts are checked with the bindings (api.SessionSecrets.Validate)
		if !envPatternRe.MatchString(n) || strings.HasSuffix(n, "*") {
			return fmt.Errorf("secret_hosts key %q is not a variable name", n)
		}
	}
	return nil
}

// agentNames lists the known agents (built-in and from cfg), sorted.
func agentNames(cfg *userConfig) []string {
	seen := map[string]bool{}
	for n := range builtinAgents {
		seen[n] = true
	}
	if cfg != nil {
		for n := range cfg.Agents {
			seen[n] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// resolveAgent returns the agent called name: a custom agent from cfg (which may
// replace a built-in one of the same name), else a built-in. An unknown name returns
// ErrUnknownAgent.
func resolveAgent(name string, cfg *userConfig, cfgPath string) (Agent, error) {
	if cfg != nil {
		if a, ok := cfg.Agents[name]; ok {
			return Agent{Name: name, Image: a.Image, Command: a.Command, Env: a.Env, Source: cfgPath,
				RawEnv: a.RawEnv, SecretHosts: a.SecretHosts}, nil
		}
	}
	if a, ok := builtinAgents[name]; ok {
		a.Name, a.Source = name, "built-in"
		return a, nil
	}
	return Agent{}, fmt.Errorf("agent %q: %w (known: %s)", name, ErrUnknownAgent, strings.Join(agentNames(cfg), ", "))
}

// envMatch reports whether the variable name matches one of the patterns.
func envMatch(patterns []string, name string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if name == p {
			return true
		}
	}
	return false
}

// forwardEnv returns the "NAME=value" entries of environ whose names match patterns,
// sorted by name. Entries without '=' or with an empty name are ignored.
func forwardEnv(patterns, environ []string) [][2]string {
	var out [][2]string
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" || !envMatch(patterns, name) {
			continue
		}
		out = append(out, [2]string{name, value})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// shellQuote quotes argv for the guest's `/bin/sh -c` (POSIX single quotes): each word
// is passed to the program byte for byte.
func shellQuote(argv []string) string {
	var b strings.Builder
	for i, w := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:@%+,") == "" {
			b.WriteString(w)
			continue
		}
		b.WriteByte('\'')
		b.WriteString(strings.ReplaceAll(w, "'", `'\''`))
		b.WriteByte('\'')
	}
	return b.String()
}

// guestCommand returns the command line the guest runs for argv ("" for a login
// shell). The agent replaces the shell (exec) so it receives the session's signals.
func guestCommand(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	return "exec " + shellQuote(argv)
}
