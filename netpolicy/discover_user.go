package netpolicy

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
	"gopkg.in/ini.v1"
)

// format is how one source of registry configuration is read.
type format int

const (
	// envURLs: an environment variable holding URLs separated by white space.
	envURLs format = iota
	// envGo: an environment variable read by cmd/go (GOPROXY, GOSUMDB).
	envGo
	// npmrc: INI lines "registry=URL" and "@scope:registry=URL", with ${VAR} expanded
	// (npm's config/lib/env-replace.js); pnpm reads the same files.
	npmrc
	// yarnrc: yarn 1's .yarnrc, lines `registry "URL"` and `"@scope:registry" "URL"`.
	yarnrc
	// yarnrcYML: yarn 2+'s .yarnrc.yml, npmRegistryServer and
	// npmScopes.NAME.npmRegistryServer.
	yarnrcYML
	// pipConf: pip's INI files, index-url and extra-index-url in any section (global,
	// install, download, ...).
	pipConf
	// goEnv: cmd/go's KEY=VALUE env files (the user's `go env -w` file, GOROOT/go.env).
	goEnv
)

// source is one file or variable a package tool reads its registry from. where returns its
// path or variable name ("" when it does not apply, e.g. the variable naming it is unset).
type source struct {
	tool   string
	format format
	where  func(Discoverer) string
	user   bool // false only for root-owned system files
}

// userSources lists every user and system configuration a registry can come from, per
// tool in the tool's own precedence order (first wins where the tool takes one value).
// None is inside a project: the files each tool also reads from the current directory and
// its parents (.npmrc, .yarnrc, .yarnrc.yml, pnpm-workspace.yaml, .pnpmfile.cjs, pip.conf
// of a virtualenv, go.work, go.mod's toolchain line, .cargo/config.toml) are the
// workspace's content, which may remove hosts but never add them. Sources: npm-config(7)
// and npmrc(5); yarn 1 "yarn config", yarn 2+ "Configuration > .yarnrc.yml"; pnpm "npmrc"
// and "config"; pip "Configuration" (Linux file locations); cmd/go "go help environment".
var userSources = []source{
	// npm: the environment beats every file (npm_config_* is case-insensitive).
	{"npm", envURLs, constWhere("npm_config_registry"), true},
	{"npm", envURLs, constWhere("NPM_CONFIG_REGISTRY"), true},
	// npm: the user config, $NPM_CONFIG_USERCONFIG or ~/.npmrc.
	{"npm", npmrc, npmUserConfig, true},
	// npm: the global config, $NPM_CONFIG_GLOBALCONFIG or PREFIX/etc/npmrc, PREFIX being
	// $NPM_CONFIG_PREFIX or the directory above the bin/ holding node.
	{"npm", npmrc, npmGlobalConfig, true},
	// npm: Debian's npm reads /etc/npmrc as its global config (root-owned).
	{"npm", npmrc, rootWhere("etc/npmrc"), false},
	// pnpm: its own user config, $XDG_CONFIG_HOME/pnpm/rc (npmrc format); it also reads
	// the npm files above.
	{"pnpm", npmrc, xdgConfigWhere("pnpm/rc"), true},
	// yarn 1: YARN_REGISTRY, then ~/.yarnrc (it also reads the npm files above).
	{"yarn", envURLs, constWhere("YARN_REGISTRY"), true},
	{"yarn", yarnrc, homeWhere(".yarnrc"), true},
	// yarn 2+: YARN_NPM_REGISTRY_SERVER, then the home .yarnrc.yml (YARN_RC_FILENAME
	// renames it).
	{"yarn", envURLs, constWhere("YARN_NPM_REGISTRY_SERVER"), true},
	{"yarn", yarnrcYML, yarnHomeRC, true},
	// pip: the environment, then $PIP_CONFIG_FILE, then the user files (XDG, then the
	// legacy ~/.pip), then the global ones (each of $XDG_CONFIG_DIRS, then /etc).
	{"pip", envURLs, constWhere("PIP_INDEX_URL"), true},
	{"pip", envURLs, constWhere("PIP_EXTRA_INDEX_URL"), true},
	{"pip", pipConf, pipEnvConfig, true},
	{"pip", pipConf, pipFiles(xdgConfigWhere("pip/pip.conf")), true},
	{"pip", pipConf, pipFiles(homeWhere(".pip/pip.conf")), true},
	{"pip", pipConf, pipFiles(xdgDirsWhere("pip/pip.conf")), true},
	{"pip", pipConf, pipFiles(rootWhere("etc/pip.conf")), true},
	// go: the environment, then the user's env file ($GOENV, default
	// $XDG_CONFIG_HOME/go/env), then GOROOT/go.env of the toolchain on PATH (Go 1.21+).
	{"go", envGo, constWhere("GOPROXY"), true},
	{"go", envGo, constWhere("GOSUMDB"), true},
	{"go", goEnv, goUserEnv, true},
	{"go", goEnv, goRootEnv, true},
}

// builtinDefault is a tool's registry when none is configured, added when the tool is on
// PATH (found, never run). Sources: npm-config(7) "registry"; yarn's
// DEFAULT_REGISTRY (yarn 1 src/constants.js, yarn 2+ npmRegistryServer default); pip's
// PyPI in pip/_internal/models/index.py (simple index and file host); cmd/go's
// defaults before go.env existed (cmd/go/internal/cfg, Go 1.20).
var builtinDefault = []struct {
	tool, key string
	bins      []string
	urls      []string
}{
	{"npm", "registry", []string{"npm", "pnpm"}, []string{"https://registry.npmjs.org/"}},
	{"yarn", "registry", []string{"yarn", "yarnpkg"}, []string{"https://registry.yarnpkg.com/"}},
	{"pip", "index-url", []string{"pip3", "pip", "python3"}, []string{"https://pypi.org/simple", "https://files.pythonhosted.org/"}},
}

// goDefaults are cmd/go's values when neither the environment nor an env file sets them
// (the lowest precedence, added when go is on PATH).
var goDefaults = map[string]string{"GOPROXY": "https://proxy.golang.org,direct", "GOSUMDB": "sum.golang.org"}

// user reads every userSources entry, then adds each tool's built-in default where no
// registry was configured.
func (d Discoverer) user(c *collector) {
	c.configured = map[string]bool{}
	c.goVars = map[string][2]string{}
	for _, s := range userSources {
		w := s.where(d)
		if w == "" {
			continue
		}
		switch s.format {
		case envURLs:
			for _, u := range strings.Fields(d.getenv(w)) {
				c.configured[s.tool] = true
				c.addURL(s.tool, "$"+w, s.user, u)
			}
		case envGo:
			// cmd/go treats an empty variable as unset (cfg.Getenv).
			if v := d.getenv(w); v != "" {
				c.setGo(w, v, "$"+w)
			}
		default:
			for _, p := range strings.Split(w, "\x00") {
				d.readSource(c, s, p)
			}
		}
	}
	if d.onPath("go") != "" {
		for k, v := range goDefaults {
			c.setGo(k, v, "go's built-in default "+k)
		}
	}
	for _, b := range builtinDefault {
		if c.configured[b.tool] || d.onPath(b.bins...) == "" {
			continue
		}
		for _, u := range b.urls {
			c.addURL(b.tool, b.tool+"'s built-in default "+b.key, true, u)
		}
	}
	c.goHosts()
}

// readSource parses one configuration file (a missing file is not an error; one that does
// not parse is a note).
func (d Discoverer) readSource(c *collector, s source, path string) {
	if _, err := os.Stat(path); err != nil {
		return
	}
	from, ok := d.workspaceFrom(c, s.tool, path)
	if !ok {
		return
	}
	data, err := d.readFile(path)
	if err != nil {
		if errors.Is(err, ErrWorkspaceSymlink) || errors.Is(err, ErrWorkspaceNotRegular) {
			c.notes = append(c.notes, Note{s.tool + " " + path, "not read: " + err.Error()})
		}
		return
	}
	path = from
	switch s.format {
	case npmrc:
		d.parseNpmrc(c, s, path, data)
	case yarnrc:
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			k, v := yarnrcLine(sc.Text())
			if k == "registry" || strings.HasSuffix(k, ":registry") {
				c.configured[s.tool] = c.configured[s.tool] || k == "registry"
				c.addURL(s.tool, path, s.user, v)
			}
		}
	case yarnrcYML:
		var cfg struct {
			Server string `yaml:"npmRegistryServer"`
			Scopes map[string]struct {
				Server string `yaml:"npmRegistryServer"`
			} `yaml:"npmScopes"`
		}
		if err := yaml.Unmarshal(data, &cfg); err != nil {
			c.notes = append(c.notes, Note{s.tool, "not discovered: parse " + path + ": " + err.Error()})
			return
		}
		if cfg.Server != "" {
			c.configured[s.tool] = true
			c.addURL(s.tool, path, s.user, d.expand(cfg.Server))
		}
		for _, sc := range cfg.Scopes {
			if sc.Server != "" {
				c.addURL(s.tool, path, s.user, d.expand(sc.Server))
			}
		}
	case pipConf:
		d.parsePipConf(c, s, path, data)
	case goEnv:
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
			if ok && !strings.HasPrefix(k, "#") && (k == "GOPROXY" || k == "GOSUMDB") {
				c.setGo(k, strings.TrimSpace(v), path)
			}
		}
	}
}

// parseNpmrc reads registry and @scope:registry keys of an npmrc (INI; only '=' separates
// key and value, since keys such as "@corp:registry" and "//host/:_authToken" hold ':').
func (d Discoverer) parseNpmrc(c *collector, s source, path string, data []byte) {
	f, err := ini.LoadSources(ini.LoadOptions{KeyValueDelimiters: "=", IgnoreInlineComment: true,
		SkipUnrecognizableLines: true, AllowBooleanKeys: true}, data)
	if err != nil {
		c.notes = append(c.notes, Note{s.tool, "not discovered: parse " + path + ": " + err.Error()})
		return
	}
	for _, sec := range f.Sections() {
		for _, k := range sec.Keys() {
			name := d.expand(k.Name())
			if name == "registry" || strings.HasSuffix(name, ":registry") {
				c.configured[s.tool] = c.configured[s.tool] || name == "registry"
				c.addURL(s.tool, path, s.user, d.expand(k.Value()))
			}
		}
	}
}

// parsePipConf reads index-url and extra-index-url (pip also accepts '_' for '-') of any
// section; values may hold several URLs, on one line or on indented continuation lines.
func (d Discoverer) parsePipConf(c *collector, s source, path string, data []byte) {
	f, err := ini.LoadSources(ini.LoadOptions{AllowPythonMultilineValues: true, SkipUnrecognizableLines: true,
		AllowBooleanKeys: true, SpaceBeforeInlineComment: true}, data)
	if err != nil {
		c.notes = append(c.notes, Note{s.tool, "not discovered: parse " + path + ": " + err.Error()})
		return
	}
	for _, sec := range f.Sections() {
		for _, k := range sec.Keys() {
			switch strings.ReplaceAll(strings.ToLower(k.Name()), "_", "-") {
			case "index-url":
				c.configured[s.tool] = true
			case "extra-index-url":
			default:
				continue
			}
			for _, u := range strings.Fields(k.Value()) {
				c.addURL(s.tool, path, s.user, u)
			}
		}
	}
}

// yarnrcLine splits a yarn 1 .yarnrc line into key and value, each optionally in double
// quotes ("" for comments and blank lines).
func yarnrcLine(line string) (key, value string) {
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return "", ""
	}
	if strings.HasPrefix(line, `"`) {
		if end := strings.Index(line[1:], `"`); end >= 0 {
			return line[1 : end+1], strings.Trim(strings.TrimSpace(line[end+2:]), `"`)
		}
		return "", ""
	}
	k, v, _ := strings.Cut(line, " ")
	return k, strings.Trim(strings.TrimSpace(v), `"`)
}

// envRef matches the variable references npm (${NAME}, ${NAME?}) and yarn (${NAME},
// ${NAME:-default}) expand in configuration values.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(\?|:-([^}]*))?\}`)

// expand replaces envRef references with the environment's values (or the default).
func (d Discoverer) expand(s string) string {
	return envRef.ReplaceAllStringFunc(s, func(m string) string {
		g := envRef.FindStringSubmatch(m)
		if v := d.getenv(g[1]); v != "" {
			return v
		}
		return g[3]
	})
}

// onPath returns the first of names found as an executable regular file in an absolute
// directory of $PATH outside the workspace ("" when none). Relative entries (".", "bin")
// are skipped: they would resolve inside whatever directory brood was started in.
func (d Discoverer) onPath(names ...string) string {
	for _, dir := range filepath.SplitList(d.getenv("PATH")) {
		if _, in := d.workspaceRel(dir); !filepath.IsAbs(dir) || in {
			continue
		}
		for _, n := range names {
			p := filepath.Join(dir, n)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
				return p
			}
		}
	}
	return ""
}

// setGo records a cmd/go variable unless a source earlier in precedence set it.
func (c *collector) setGo(k, v, from string) {
	if _, ok := c.goVars[k]; !ok {
		c.goVars[k] = [2]string{v, from}
	}
}

// goHosts turns the GOPROXY and GOSUMDB values found into hosts. GOPROXY is a list
// separated by ',' or '|' ("direct", "off" and file: URLs name no host); GOSUMDB is "off",
// "NAME", "NAME+KEY" or "NAME+KEY URL" (the database is https://NAME unless a URL is
// given). Source: "go help goproxy", "go help module-auth".
func (c *collector) goHosts() {
	if v, ok := c.goVars["GOPROXY"]; ok {
		for _, p := range strings.FieldsFunc(v[0], func(r rune) bool { return r == ',' || r == '|' }) {
			if p = strings.TrimSpace(p); p == "direct" || p == "off" || p == "" || strings.HasPrefix(p, "file:") {
				continue
			}
			c.addURL("go", v[1], true, p)
		}
	}
	if v, ok := c.goVars["GOSUMDB"]; ok {
		f := strings.Fields(v[0])
		switch {
		case len(f) == 0 || f[0] == "off":
		case len(f) >= 2:
			c.addURL("go", v[1], true, f[1])
		default:
			name, _, _ := strings.Cut(f[0], "+")
			c.addHost("go", v[1], true, name, "443")
		}
	}
}

func constWhere(v string) func(Discoverer) string { return func(Discoverer) string { return v } }

func rootWhere(rel string) func(Discoverer) string {
	return func(d Discoverer) string { return filepath.Join(d.root(), rel) }
}

func homeWhere(rel string) func(Discoverer) string {
	return func(d Discoverer) string {
		if d.home() == "" {
			return ""
		}
		return filepath.Join(d.home(), rel)
	}
}

// xdgConfig is $XDG_CONFIG_HOME, or ~/.config when it is unset or relative (XDG Base
// Directory Specification).
func (d Discoverer) xdgConfig() string {
	if x := d.getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		return x
	}
	if d.home() == "" {
		return ""
	}
	return filepath.Join(d.home(), ".config")
}

func xdgConfigWhere(rel string) func(Discoverer) string {
	return func(d Discoverer) string {
		if d.xdgConfig() == "" {
			return ""
		}
		return filepath.Join(d.xdgConfig(), rel)
	}
}

// xdgDirsWhere names rel in each directory of $XDG_CONFIG_DIRS (default /etc/xdg),
// separated by NUL for pipFiles.
func xdgDirsWhere(rel string) func(Discoverer) string {
	return func(d Discoverer) string {
		var out []string
		dirs := filepath.SplitList(d.getenv("XDG_CONFIG_DIRS"))
		if len(dirs) == 0 {
			dirs = []string{filepath.Join(d.root(), "etc/xdg")}
		}
		for _, dir := range dirs {
			if filepath.IsAbs(dir) {
				out = append(out, filepath.Join(dir, rel))
			}
		}
		return strings.Join(out, "\x00")
	}
}

// pipFiles skips pip's configuration files when PIP_CONFIG_FILE is os.devnull, which
// tells pip to load none.
func pipFiles(w func(Discoverer) string) func(Discoverer) string {
	return func(d Discoverer) string {
		if d.getenv("PIP_CONFIG_FILE") == os.DevNull {
			return ""
		}
		return w(d)
	}
}

func pipEnvConfig(d Discoverer) string {
	if p := d.getenv("PIP_CONFIG_FILE"); filepath.IsAbs(p) && p != os.DevNull {
		return p
	}
	return ""
}

func npmUserConfig(d Discoverer) string {
	for _, k := range []string{"npm_config_userconfig", "NPM_CONFIG_USERCONFIG"} {
		if p := d.getenv(k); filepath.IsAbs(p) {
			return p
		}
	}
	return homeWhere(".npmrc")(d)
}

func npmGlobalConfig(d Discoverer) string {
	for _, k := range []string{"npm_config_globalconfig", "NPM_CONFIG_GLOBALCONFIG"} {
		if p := d.getenv(k); filepath.IsAbs(p) {
			return p
		}
	}
	prefix := ""
	for _, k := range []string{"npm_config_prefix", "NPM_CONFIG_PREFIX"} {
		if p := d.getenv(k); filepath.IsAbs(p) && prefix == "" {
			prefix = p
		}
	}
	if prefix == "" {
		node := d.onPath("node", "nodejs")
		if node == "" {
			return ""
		}
		if real, err := filepath.EvalSymlinks(node); err == nil {
			node = real
		}
		prefix = filepath.Dir(filepath.Dir(node))
	}
	if p := filepath.Join(prefix, "etc/npmrc"); p != filepath.Join(d.root(), "etc/npmrc") {
		return p
	}
	return ""
}

func yarnHomeRC(d Discoverer) string {
	name := d.getenv("YARN_RC_FILENAME")
	if name == "" || strings.Contains(name, "/") {
		name = ".yarnrc.yml"
	}
	return homeWhere(name)(d)
}

// goUserEnv is cmd/go's user env file: $GOENV ("off": none), else
// $XDG_CONFIG_HOME/go/env (os.UserConfigDir).
func goUserEnv(d Discoverer) string {
	switch p := d.getenv("GOENV"); {
	case p == "off":
		return ""
	case filepath.IsAbs(p):
		return p
	}
	return xdgConfigWhere("go/env")(d)
}

// goRootEnv is GOROOT/go.env: $GOROOT, else the directory above the bin/ holding the go
// binary found on PATH (after symbolic links, as cmd/go finds its own GOROOT).
func goRootEnv(d Discoverer) string {
	if r := d.getenv("GOROOT"); filepath.IsAbs(r) {
		return filepath.Join(r, "go.env")
	}
	bin := d.onPath("go")
	if bin == "" {
		return ""
	}
	if real, err := filepath.EvalSymlinks(bin); err == nil {
		bin = real
	}
	return filepath.Join(filepath.Dir(filepath.Dir(bin)), "go.env")
}

// npmSystem reads the root-owned /etc/npmrc only (SystemOnly discovery).
func (d Discoverer) npmSystem(c *collector) {
	c.configured = map[string]bool{}
	d.readSource(c, source{"npm", npmrc, rootWhere("etc/npmrc"), false}, filepath.Join(d.root(), "etc/npmrc"))
}
