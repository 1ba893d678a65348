package netpolicy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// Discovered is one package registry host found in the host's own tool configuration (the
// Standard profile allows it, so that an organisation's internal mirrors just work). No
// registry host name is built into brood: every one comes from a command or file named in
// From.
type Discovered struct {
	Entry Entry
	// Tool is "go", "npm", "pip", "apt" or "cargo".
	Tool string
	// From names the command or file the host came from, e.g. "go env GOPROXY",
	// "/etc/apt/sources.list.d/debian.sources".
	From string
	// UserControlled marks hosts the user could have chosen (user files, environment, the
	// output of user-run tools), as opposed to root-owned system files; they are dropped when
	// the system policy forbids adding hosts.
	UserControlled bool
}

// commandTimeout bounds each tool invoked for discovery (go, npm, pip, python3).
const commandTimeout = 5 * time.Second

// Discoverer finds the registries the host is configured to use. Discovery runs as the
// developer (in the frontend), reading their configuration. The zero value uses the real
// environment, the real root and exec.
type Discoverer struct {
	// Root prefixes system paths such as /etc/apt (default "/").
	Root string
	// Home is the user's home directory (default $HOME).
	Home string
	// Getenv reads the environment (default os.Getenv).
	Getenv func(string) string
	// Run runs a command and returns its standard output (default: exec with PATH lookup
	// and commandTimeout). An error means the tool is absent or failed.
	Run func(ctx context.Context, name string, args ...string) ([]byte, error)
	// SystemOnly limits discovery to root-owned system files (apt sources, /etc/npmrc): no
	// tools run, no environment or home directory read. The privileged helper uses it to
	// rediscover what it can trust itself, since everything a client sends is
	// user-controlled.
	SystemOnly bool
}

func (d Discoverer) root() string {
	if d.Root == "" {
		return "/"
	}
	return d.Root
}

func (d Discoverer) getenv(k string) string {
	if d.Getenv == nil {
		return os.Getenv(k)
	}
	return d.Getenv(k)
}

func (d Discoverer) home() string {
	if d.Home != "" {
		return d.Home
	}
	return d.getenv("HOME")
}

func (d Discoverer) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if d.Run != nil {
		return d.Run(ctx, name, args...)
	}
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		return nil, fmt.Errorf("run %s %s: %w", name, strings.Join(args, " "), err)
	}
	return out, nil
}

// Discover returns the registry hosts found, sorted by tool then host, and notes on what
// could not be discovered (tools absent, entries that are not host names).
func (d Discoverer) Discover(ctx context.Context) ([]Discovered, []Note) {
	c := &collector{seen: map[string]bool{}}
	if d.SystemOnly {
		d.npmFiles(c, false)
		d.apt(c)
	} else {
		d.goProxy(ctx, c)
		d.npm(ctx, c)
		d.pip(ctx, c)
		d.apt(c)
		d.cargo(c)
	}
	sort.SliceStable(c.found, func(i, j int) bool {
		if c.found[i].Tool != c.found[j].Tool {
			return c.found[i].Tool < c.found[j].Tool
		}
		return c.found[i].Entry.Pattern.Name < c.found[j].Entry.Pattern.Name
	})
	return c.found, c.notes
}

type collector struct {
	found []Discovered
	notes []Note
	seen  map[string]bool
}

// addURL records the host of a registry URL, with the port its scheme implies (http 80,
// https 443, ssh 22) or the explicit one.
func (c *collector) addURL(tool, from string, user bool, raw string) {
	raw = strings.Trim(strings.TrimSpace(raw), `"'`)
	for _, pre := range []string{"sparse+", "registry+", "git+"} {
		raw = strings.TrimPrefix(raw, pre)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		c.notes = append(c.notes, Note{tool + " " + raw, "not a URL with a host (" + from + ")"})
		return
	}
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		case "ssh":
			port = "22"
		default:
			c.notes = append(c.notes, Note{tool + " " + raw, "scheme " + u.Scheme + " not reachable over the network (" + from + ")"})
			return
		}
	}
	c.addHost(tool, from, user, u.Hostname(), port)
}

func (c *collector) addHost(tool, from string, user bool, host, port string) {
	if net.ParseIP(host) != nil {
		c.notes = append(c.notes, Note{tool + " " + host, "an IP address, not a host name; add a policy entry (" + from + ")"})
		return
	}
	e, err := ParseEntry(host, port)
	if err != nil {
		c.notes = append(c.notes, Note{tool + " " + host, err.Error() + " (" + from + ")"})
		return
	}
	key := tool + "\x00" + e.String()
	if c.seen[key] {
		return
	}
	c.seen[key] = true
	c.found = append(c.found, Discovered{Entry: e, Tool: tool, From: from, UserControlled: user})
}

// goProxy reads GOPROXY (a list separated by ',' or '|'; "direct" and "off" name no host)
// and GOSUMDB ("off", "NAME", "NAME+KEY" or "NAME+KEY URL"; the database is https://NAME
// unless a URL is given) from `go env`.
func (d Discoverer) goProxy(ctx context.Context, c *collector) {
	out, err := d.run(ctx, "go", "env", "GOPROXY", "GOSUMDB")
	if err != nil {
		c.notes = append(c.notes, Note{"go", "not discovered: " + err.Error()})
		return
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 0 {
		for _, p := range strings.FieldsFunc(lines[0], func(r rune) bool { return r == ',' || r == '|' }) {
			if p = strings.TrimSpace(p); p == "direct" || p == "off" || p == "" || strings.HasPrefix(p, "file:") {
				continue
			}
			c.addURL("go", "go env GOPROXY", true, p)
		}
	}
	if len(lines) > 1 {
		f := strings.Fields(lines[1])
		switch {
		case len(f) == 0 || f[0] == "off":
		case len(f) >= 2:
			c.addURL("go", "go env GOSUMDB", true, f[1])
		default:
			name, _, _ := strings.Cut(f[0], "+")
			c.addHost("go", "go env GOSUMDB", true, name, "443")
		}
	}
}

// npm asks npm for its registry and reads scoped registries ("@scope:registry=URL") from
// the user and global npmrc files.
func (d Discoverer) npm(ctx context.Context, c *collector) {
	if out, err := d.run(ctx, "npm", "config", "get", "registry"); err == nil {
		c.addURL("npm", "npm config get registry", true, string(out))
	} else {
		c.notes = append(c.notes, Note{"npm", "not discovered: " + err.Error()})
	}
	d.npmFiles(c, true)
}

// npmFiles reads registries from the global npmrc and, with user, the user's ~/.npmrc.
func (d Discoverer) npmFiles(c *collector, user bool) {
	files := []struct {
		path string
		user bool
	}{{filepath.Join(d.root(), "etc/npmrc"), false}}
	if user {
		files = append(files, struct {
			path string
			user bool
		}{filepath.Join(d.home(), ".npmrc"), true})
	}
	for _, f := range files {
		data, err := os.ReadFile(f.path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), "=")
			k = strings.TrimSpace(k)
			if ok && (k == "registry" || strings.HasSuffix(k, ":registry")) {
				c.addURL("npm", f.path, f.user, v)
			}
		}
	}
}

// pip reads index-url/extra-index-url from `pip config list` and PIP_INDEX_URL /
// PIP_EXTRA_INDEX_URL; with none configured it asks the installed pip for its default index
// and file host.
func (d Discoverer) pip(ctx context.Context, c *collector) {
	n := len(c.found)
	for _, k := range []string{"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"} {
		for _, u := range strings.Fields(d.getenv(k)) {
			c.addURL("pip", "$"+k, true, u)
		}
	}
	out, err := d.run(ctx, "pip3", "config", "list")
	if err != nil {
		c.notes = append(c.notes, Note{"pip", "not discovered: " + err.Error()})
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && (strings.HasSuffix(k, ".index-url") || strings.HasSuffix(k, ".extra-index-url")) {
			for _, u := range strings.Fields(strings.Trim(v, `'"`)) {
				c.addURL("pip", "pip3 config list ("+k+")", true, u)
			}
		}
	}
	if len(c.found) > n {
		return
	}
	const ask = "from pip._internal.models.index import PyPI; print(PyPI.simple_url); print(PyPI.file_storage_domain)"
	out, err = d.run(ctx, "python3", "-c", ask)
	if err != nil {
		c.notes = append(c.notes, Note{"pip", "default index not discovered: " + err.Error()})
		return
	}
	lines := strings.Fields(string(out))
	if len(lines) == 2 {
		c.addURL("pip", "pip's built-in default (python3 -c PyPI.simple_url)", true, lines[0])
		c.addHost("pip", "pip's built-in default (python3 -c PyPI.file_storage_domain)", true, lines[1], "443")
	}
}

// apt reads the one-line (*.list, sources.list) and deb822 (*.sources) source files under
// /etc/apt. Disabled (Enabled: no) stanzas and commented lines are skipped.
func (d Discoverer) apt(c *collector) {
	dir := filepath.Join(d.root(), "etc/apt")
	files := []string{filepath.Join(dir, "sources.list")}
	for _, pat := range []string{"*.list", "*.sources"} {
		m, _ := filepath.Glob(filepath.Join(dir, "sources.list.d", pat))
		files = append(files, m...)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if strings.HasSuffix(f, ".sources") {
			for _, stanza := range strings.Split(string(data), "\n\n") {
				var uris []string
				enabled := true
				for _, line := range strings.Split(stanza, "\n") {
					k, v, ok := strings.Cut(line, ":")
					if !ok || strings.HasPrefix(line, "#") || strings.HasPrefix(line, " ") {
						continue
					}
					switch strings.ToLower(strings.TrimSpace(k)) {
					case "uris":
						uris = append(uris, strings.Fields(v)...)
					case "enabled":
						enabled = strings.TrimSpace(strings.ToLower(v)) != "no"
					}
				}
				if enabled {
					for _, u := range uris {
						c.addURL("apt", f, false, u)
					}
				}
			}
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Fields(line)
			if len(fields) < 2 || (fields[0] != "deb" && fields[0] != "deb-src") {
				continue
			}
			i := 1
			if strings.HasPrefix(fields[1], "[") {
				for i < len(fields) && !strings.HasSuffix(fields[i], "]") {
					i++
				}
				i++
			}
			if i < len(fields) {
				c.addURL("apt", f, false, fields[i])
			}
		}
	}
}

// cargo reads registries.NAME.index and source.NAME.registry from $CARGO_HOME/config.toml
// (or config). Cargo's built-in default registry is not in any file and is therefore not
// discovered: name it in the policy if needed.
func (d Discoverer) cargo(c *collector) {
	home := d.getenv("CARGO_HOME")
	if home == "" {
		home = filepath.Join(d.home(), ".cargo")
	}
	found := false
	for _, name := range []string{"config.toml", "config"} {
		f := filepath.Join(home, name)
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		found = true
		var cfg struct {
			Registries map[string]struct {
				Index string `toml:"index"`
			} `toml:"registries"`
			Source map[string]struct {
				Registry string `toml:"registry"`
			} `toml:"source"`
		}
		if err := toml.Unmarshal(data, &cfg); err != nil {
			c.notes = append(c.notes, Note{"cargo", "not discovered: " + f + ": " + err.Error()})
			continue
		}
		for _, r := range cfg.Registries {
			if r.Index != "" {
				c.addURL("cargo", f, true, r.Index)
			}
		}
		for _, s := range cfg.Source {
			if s.Registry != "" {
				c.addURL("cargo", f, true, s.Registry)
			}
		}
	}
	if !found {
		c.notes = append(c.notes, Note{"cargo", "no config file in " + home + "; cargo's built-in registry is not discovered"})
	}
}
