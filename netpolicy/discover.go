package netpolicy

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// Discovered is one package registry host found in the host's own tool configuration (the
// Standard profile allows it, so that an organisation's internal mirrors just work). Every
// host comes from a file, an environment variable or a tool's documented built-in default
// named in From; discovery never runs a tool (see userSources).
type Discovered struct {
	Entry Entry
	// Tool is "go", "npm", "yarn", "pnpm", "pip", "apt" or "cargo".
	Tool string
	// From names the file, variable or default the host came from, e.g. "/home/u/.npmrc",
	// "$PIP_INDEX_URL", "/etc/apt/sources.list.d/debian.sources". A file is named by the
	// absolute path discovery read (before symbolic links), so a caller can tell when it
	// lies inside a workspace.
	From string
	// UserControlled marks hosts the user could have chosen (user files, environment, the
	// defaults of tools on the user's PATH), as opposed to root-owned system files; they are
	// dropped when the system policy forbids adding hosts.
	UserControlled bool
}

// Discoverer finds the registries the host is configured to use by parsing the files and
// variables each tool documents for its user and system configuration (userSources). It
// never runs a tool and never reads the current directory or a project's files: `npm config
// get`, `pip config list`, `go env` or `python3 -c` run in a repository would execute or
// honour that repository's own configuration (pip/__init__.py on python's path, .npmrc,
// go.work, go.mod's toolchain line). The zero value uses the real environment and root.
type Discoverer struct {
	// Root prefixes system paths such as /etc/apt and /etc/npmrc (default "/").
	Root string
	// Home is the user's home directory (default $HOME).
	Home string
	// Getenv reads the environment (default os.Getenv). PATH is only searched for tool
	// binaries (absolute entries only), never run.
	Getenv func(string) string
	// Workspace is the directory brood snapshots (W; empty: none). PATH entries inside it
	// are ignored (a repository's bin/ put on PATH by direnv must not pick the go.env or
	// npm prefix read), and a configuration file inside it (the home directory is in W, or
	// a variable points there) is workspace content: it is read only when WorkspaceRisk
	// says review treats it as high-risk (a change to it is never applied without being
	// named), and its From says so; otherwise it is skipped with a note.
	Workspace string
	// WorkspaceRisk returns why review treats the W-relative slash path rel as high-risk,
	// "" when a change to it could be applied unnamed (nil: always "").
	WorkspaceRisk func(rel string) string
	// wsDirs are Workspace made absolute, as given and with symbolic links resolved (set
	// by Discover).
	wsDirs []string
	// SystemOnly limits discovery to root-owned system files (apt sources, /etc/npmrc): no
	// environment or home directory read. The privileged helper uses it to rediscover what
	// it can trust itself, since everything a client sends is user-controlled.
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

// Discover returns the registry hosts found, sorted by tool then host, and notes on what
// could not be discovered (files that do not parse, entries that are not host names).
// ctx is unused (nothing blocks but local file reads); it is kept for callers that bound
// discovery.
func (d Discoverer) Discover(ctx context.Context) ([]Discovered, []Note) {
	c := &collector{seen: map[string]bool{}}
	if d.Workspace != "" {
		abs, err := filepath.Abs(d.Workspace)
		if err != nil {
			abs = d.Workspace
		}
		d.wsDirs = []string{abs, resolvedPath(abs)}
	}
	if d.SystemOnly {
		d.npmSystem(c)
		d.apt(c)
	} else {
		d.user(c)
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

// resolvedPath is p made absolute with its symbolic links resolved (p itself when that
// fails, e.g. it does not exist).
func resolvedPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		p = a
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// workspaceRel returns p's slash path relative to d.Workspace when p, or the file its
// symbolic links lead to, lies inside it.
func (d Discoverer) workspaceRel(p string) (string, bool) {
	for _, q := range []string{resolvedPath(p), p} {
		for _, w := range d.wsDirs {
			if rel, err := filepath.Rel(w, q); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				return filepath.ToSlash(rel), true
			}
		}
	}
	return "", false
}

// readFile reads a configuration file: one inside the workspace (by its path as named)
// with ReadWorkspaceFile (no link followed, a regular file, at most
// MaxWorkspaceFileBytes), any other with os.ReadFile.
func (d Discoverer) readFile(path string) ([]byte, error) {
	a, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	for _, w := range d.wsDirs {
		if rel, err := filepath.Rel(w, a); err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../") {
			return ReadWorkspaceFile(w, filepath.ToSlash(rel), MaxWorkspaceFileBytes)
		}
	}
	return os.ReadFile(path)
}

// WorkspaceNotRead starts the Why of a Note about a configuration file skipped because it
// lies inside the workspace (Discoverer.Workspace).
const WorkspaceNotRead = "not read: it is workspace content"

// workspaceFrom decides whether a configuration file at path may be read: outside the
// workspace it is named by path; inside, only when WorkspaceRisk flags it, named with
// that reason ("", false: skip it).
func (d Discoverer) workspaceFrom(c *collector, tool, path string) (string, bool) {
	rel, in := d.workspaceRel(path)
	if !in {
		return path, true
	}
	risk := ""
	if d.WorkspaceRisk != nil {
		risk = d.WorkspaceRisk(rel)
	}
	if risk == "" {
		c.notes = append(c.notes, Note{tool + " " + path, WorkspaceNotRead + " (" + rel + ") that a reviewed change could replace without naming it"})
		return "", false
	}
	return path + " (workspace content; review holds changes to it: " + risk + ")", true
}

type collector struct {
	found []Discovered
	notes []Note
	seen  map[string]bool
	// configured marks tools whose main registry a source named (no built-in default then).
	configured map[string]bool
	// goVars holds cmd/go's GOPROXY and GOSUMDB as {value, source}, first source wins.
	goVars map[string][2]string
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
		data, err := d.readFile(f)
		if err != nil {
			continue
		}
		from, ok := d.workspaceFrom(c, "apt", f)
		if !ok {
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
						c.addURL("apt", from, false, u)
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
				c.addURL("apt", from, false, fields[i])
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
	found, ok := false, false
	for _, name := range []string{"config.toml", "config"} {
		f := filepath.Join(home, name)
		data, err := d.readFile(f)
		if err != nil {
			continue
		}
		found = true
		if f, ok = d.workspaceFrom(c, "cargo", f); !ok {
			continue
		}
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
