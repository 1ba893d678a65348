package agentcfg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"golang.org/x/sys/unix"
)

// MaxFileSize is the largest host settings file copied, in bytes; a larger one is skipped
// with a note. It keeps every file well inside one SSH packet (RFC 4253 section 6.1
// requires 32768 bytes of payload; golang.org/x/crypto/ssh accepts 256 KiB) for the
// transport that writes it into the guest.
const MaxFileSize = 128 << 10

// Secret is one credential value the agent needs: Name is where it comes from (the
// environment variable), Value what the guest receives. It is the seam where real
// values can be replaced by placeholders: Build uses only Value, as given.
type Secret struct {
	Name, Value string
}

// File is one file of the guest home: Path relative to $HOME (slash-separated, no ".."),
// Mode its permission bits (0600 for anything holding a Secret), Data its content.
type File struct {
	Path string
	Mode fs.FileMode
	Data []byte
}

// Plan is what the guest home of one agent must hold.
type Plan struct {
	// Files, sorted by Path, each at most MaxFileSize bytes.
	Files []File
	// Env holds variables to set for the agent (name, value), beyond those forwarded.
	Env [][2]string
	// Notes are lines for the run output: the settings copied, each item dropped and why,
	// each file skipped, how the key is used.
	Notes []string
}

// Options change what Build copies.
type Options struct {
	// NoSettings skips the copy of the host settings (`--no-settings`); the files that make
	// the key the agent's login are still generated.
	NoSettings bool
	// LoginFile names the host login file copied with placeholders ("~/.codex/auth.json"),
	// when there is one and no API key: the login note then says the agent uses it, not
	// that the agent will ask to sign in.
	LoginFile string
}

// agentSpec is one built-in agent's table entry.
type agentSpec struct {
	// keys are the environment variables holding its API key, in order of preference.
	keys []string
	// build fills p from the secrets found and the host home (nil when NoSettings).
	build func(b *builder) error
}

// agents is the table of built-in agents; the names are frontend/cli's built-in agents.
var agents = map[string]agentSpec{
	"codex":       {keys: []string{"OPENAI_API_KEY", "CODEX_API_KEY"}, build: buildCodex},
	"claude-code": {keys: []string{"ANTHROPIC_API_KEY"}, build: buildClaude},
	"gemini":      {keys: []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"}, build: buildGemini},
	"opencode":    {keys: []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY"}, build: buildOpencode},
	"hermes":      {keys: []string{"NOUS_API_KEY", "OPENROUTER_API_KEY", "OPENAI_API_KEY"}, build: buildHermes},
}

// Known reports whether agent has a table entry (the built-in agents except shell).
func Known(agent string) bool { _, ok := agents[agent]; return ok }

// Secrets returns the API keys of agent found in environ ("NAME=value" entries), in the
// agent's order of preference; empty values are ignored. An unknown agent has none.
func Secrets(agent string, environ []string) []Secret {
	spec, ok := agents[agent]
	if !ok {
		return nil
	}
	vals := map[string]string{}
	for _, kv := range environ {
		if n, v, ok := strings.Cut(kv, "="); ok && v != "" {
			vals[n] = v
		}
	}
	var out []Secret
	for _, k := range spec.keys {
		if v, ok := vals[k]; ok {
			out = append(out, Secret{Name: k, Value: v})
		}
	}
	return out
}

// Build returns the plan of agent's guest home from secrets (Secrets' result, or the
// same with placeholder values) and the developer's home directory home (an absolute
// path; read only unless opts.NoSettings). It returns ErrUnknownAgent for an agent
// without a table entry, and an error wrapping ErrMalformed, naming the file, when a
// host settings file does not parse; a file that cannot be read safely (a symlink out of
// its config directory, not a regular file, too large) is skipped with a note.
func Build(agent string, secrets []Secret, home string, opts Options) (Plan, error) {
	spec, ok := agents[agent]
	if !ok {
		return Plan{}, fmt.Errorf("agent settings for %q: %w", agent, ErrUnknownAgent)
	}
	b := &builder{home: home, noSettings: opts.NoSettings, secrets: secrets, loginFile: opts.LoginFile}
	defer b.close()
	if err := spec.build(b); err != nil {
		return Plan{}, err
	}
	sort.Slice(b.plan.Files, func(i, j int) bool { return b.plan.Files[i].Path < b.plan.Files[j].Path })
	return b.plan, nil
}

// builder accumulates one Plan.
type builder struct {
	home       string
	noSettings bool
	loginFile  string
	secrets    []Secret
	roots      []*os.Root
	plan       Plan
}

func (b *builder) close() {
	for _, r := range b.roots {
		r.Close()
	}
}

// secret returns the first of secrets named one of names.
func (b *builder) secret(names ...string) (Secret, bool) {
	for _, s := range b.secrets {
		for _, n := range names {
			if s.Name == n {
				return s, true
			}
		}
	}
	return Secret{}, false
}

// noKey notes that no API key of the agent is in the environment ("OPENAI_API_KEY",
// "codex"): the agent then uses the host login file copied (b.loginFile) or asks to sign in.
func (b *builder) noKey(key, agent string) {
	if b.loginFile != "" {
		b.note("login: no %s in the environment: %s uses your sign-in from %s, with placeholders for its tokens", key, agent, b.loginFile)
		return
	}
	if b.noSettings {
		b.note("login: no %s in the environment: %s will ask to sign in (--no-settings: no host file of the agent is read, its login file neither)", key, agent)
		return
	}
	b.note("login: no %s in the environment: %s will ask to sign in", key, agent)
}

func (b *builder) note(format string, args ...any) {
	b.plan.Notes = append(b.plan.Notes, fmt.Sprintf(format, args...))
}

func (b *builder) add(p string, mode fs.FileMode, data []byte) {
	b.plan.Files = append(b.plan.Files, File{Path: p, Mode: mode, Data: data})
}

// read returns the host file dir/name of the developer's home (dir is the agent's config
// directory, relative to the home, e.g. ".codex"), or nil when there is none, NoSettings
// is set, or it cannot be read safely (then with a note). The directory is opened as an
// os.Root: no symlink inside it may lead out of it. Only the error of reading an existing,
// safe file is returned.
func (b *builder) read(dir, name string) ([]byte, error) {
	if b.noSettings {
		return nil, nil
	}
	show := "~/" + path.Join(dir, name)
	home, err := os.OpenRoot(b.home)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("open home %s: %w", b.home, err)
	}
	b.roots = append(b.roots, home)
	root, err := home.OpenRoot(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		b.note("settings: skipped %s: %v", show, err)
		return nil, nil
	}
	b.roots = append(b.roots, root)
	f, err := root.OpenFile(name, os.O_RDONLY|unix.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		b.note("settings: skipped %s: %v", show, err)
		return nil, nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", show, err)
	}
	if !fi.Mode().IsRegular() {
		b.note("settings: skipped %s: not a regular file", show)
		return nil, nil
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", show, err)
	}
	if len(data) > MaxFileSize {
		b.note("settings: skipped %s: larger than %d bytes", show, MaxFileSize)
		return nil, nil
	}
	b.note("settings: copying %s", show)
	return data, nil
}

// copyText copies the host file dir/name as it is (instructions such as AGENTS.md).
func (b *builder) copyText(dir, name string) error {
	data, err := b.read(dir, name)
	if err != nil || data == nil {
		return err
	}
	b.add(path.Join(dir, name), 0o644, data)
	return nil
}

// readJSON decodes the host JSON file dir/name into an object (nil when there is none).
// Numbers are kept as written (json.Number); anything after the object is an error.
func (b *builder) readJSON(dir, name string) (map[string]any, error) {
	data, err := b.read(dir, name)
	if err != nil || data == nil {
		return nil, err
	}
	m, err := DecodeObject(data)
	if err != nil {
		return nil, fmt.Errorf("settings ~/%s: %w: %w", path.Join(dir, name), ErrMalformed, err)
	}
	return m, nil
}

// DecodeObject decodes data, which must be exactly one JSON object (RFC 8259) and
// nothing after it, into a map with numbers kept as written (json.Number). It returns an
// error for invalid JSON, a top-level value that is not an object, or trailing data.
func DecodeObject(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("not a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the top-level object")
	}
	return m, nil
}

// readTOML decodes the host TOML file dir/name into a table (nil when there is none).
func (b *builder) readTOML(dir, name string) (map[string]any, error) {
	data, err := b.read(dir, name)
	if err != nil || data == nil {
		return nil, err
	}
	m := map[string]any{}
	if err := toml.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("settings ~/%s: %w: %w", path.Join(dir, name), ErrMalformed, err)
	}
	return m, nil
}

// drop removes the key at keys (a path of nested tables) from m, noting it with why.
func (b *builder) drop(m map[string]any, file, why string, keys ...string) {
	for i, k := range keys {
		v, ok := m[k]
		if !ok {
			return
		}
		if i == len(keys)-1 {
			delete(m, k)
			name := strings.Join(keys, ".")
			entries, _ := v.(map[string]any)
			if len(entries) == 0 || !strings.Contains(strings.ToLower(k), "mcp") {
				b.note("settings: dropped %s from %s (%s)", name, file, why)
				return
			}
			// An MCP server table: one note per server, by name.
			servers := make([]string, 0, len(entries))
			for n := range entries {
				servers = append(servers, n)
			}
			sort.Strings(servers)
			for _, n := range servers {
				b.note("settings: dropped %s.%s from %s (an MCP server %s)", name, n, file, why)
			}
			return
		}
		if m, ok = v.(map[string]any); !ok {
			return
		}
	}
}

// dropEach removes the key last from every table of the table at keys (e.g. the apiKey
// option of each provider), noting each.
func (b *builder) dropEach(m map[string]any, file, why string, last []string, keys ...string) {
	t := m
	for _, k := range keys {
		next, ok := t[k].(map[string]any)
		if !ok {
			return
		}
		t = next
	}
	names := make([]string, 0, len(t))
	for n := range t {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if sub, ok := t[n].(map[string]any); ok {
			b.drop(sub, file, why, last...)
		}
	}
}

// set puts v at keys in m, making the tables on the way (a non-table on the way is
// replaced).
func set(m map[string]any, v any, keys ...string) {
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
}

// addJSON adds m as the JSON file p (indented, keys sorted).
func (b *builder) addJSON(p string, mode fs.FileMode, m map[string]any) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", p, err)
	}
	b.add(p, mode, append(data, '\n'))
	return nil
}
