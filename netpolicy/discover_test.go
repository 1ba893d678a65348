package netpolicy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/internal/hostilews"
)

func writeTestFile(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// sourceCase exercises userSources[row]: files (paths starting R/ for the root, H/ for the
// home, X/ for elsewhere) and environment ($R, $H, $X expanded) that configure host, which
// must be found with From (same expansion).
type sourceCase struct {
	row   int
	files map[string]string
	exec  []string // files to make executable (R/H/X paths)
	env   map[string]string
	host  string
	from  string
}

var sourceCases = []sourceCase{
	{row: 0, env: map[string]string{"npm_config_registry": "https://a0.example/"}, host: "a0.example (443/tcp)", from: "$npm_config_registry"},
	{row: 1, env: map[string]string{"NPM_CONFIG_REGISTRY": "http://a1.example:8080/"}, host: "a1.example (8080/tcp)", from: "$NPM_CONFIG_REGISTRY"},
	{row: 2, files: map[string]string{"H/.npmrc": "registry=https://a2.example/\n//a2.example/:_authToken=${TOK}\n"}, host: "a2.example (443/tcp)", from: "H/.npmrc"},
	{row: 2, files: map[string]string{"H/.npmrc": "; comment\n@corp:registry = https://a2s.example/npm/\n"}, host: "a2s.example (443/tcp)", from: "H/.npmrc"},
	{row: 2, files: map[string]string{"X/u.npmrc": "registry=${CORP_NPM}\n"}, env: map[string]string{"NPM_CONFIG_USERCONFIG": "$X/u.npmrc", "CORP_NPM": "https://a2e.example/"}, host: "a2e.example (443/tcp)", from: "X/u.npmrc"},
	{row: 3, files: map[string]string{"X/prefix/etc/npmrc": "registry=https://a3.example/\n"}, env: map[string]string{"NPM_CONFIG_PREFIX": "$X/prefix"}, host: "a3.example (443/tcp)", from: "X/prefix/etc/npmrc"},
	{row: 3, files: map[string]string{"X/node/bin/node": "", "X/node/etc/npmrc": "registry=https://a3n.example/\n"}, exec: []string{"X/node/bin/node"}, env: map[string]string{"PATH": "relative/bin:$X/node/bin"}, host: "a3n.example (443/tcp)", from: "X/node/etc/npmrc"},
	{row: 3, files: map[string]string{"X/g.npmrc": "registry=https://a3g.example/\n"}, env: map[string]string{"NPM_CONFIG_GLOBALCONFIG": "$X/g.npmrc"}, host: "a3g.example (443/tcp)", from: "X/g.npmrc"},
	{row: 4, files: map[string]string{"R/etc/npmrc": "registry=https://a4.example/\n"}, host: "a4.example (443/tcp)", from: "R/etc/npmrc"},
	{row: 5, files: map[string]string{"H/.config/pnpm/rc": "registry=https://a5.example/\n"}, host: "a5.example (443/tcp)", from: "H/.config/pnpm/rc"},
	{row: 6, env: map[string]string{"YARN_REGISTRY": "https://a6.example/"}, host: "a6.example (443/tcp)", from: "$YARN_REGISTRY"},
	{row: 7, files: map[string]string{"H/.yarnrc": "# yarn lockfile v1\nregistry \"https://a7.example/\"\n\"@corp:registry\" \"https://a7s.example/\"\n"}, host: "a7s.example (443/tcp)", from: "H/.yarnrc"},
	{row: 8, env: map[string]string{"YARN_NPM_REGISTRY_SERVER": "https://a8.example"}, host: "a8.example (443/tcp)", from: "$YARN_NPM_REGISTRY_SERVER"},
	{row: 9, files: map[string]string{"H/.yarnrc.yml": "npmScopes:\n  corp:\n    npmRegistryServer: \"https://a9.example\"\nnpmRegistryServer: \"${YARN_REG:-https://a9d.example}\"\n"}, host: "a9.example (443/tcp)", from: "H/.yarnrc.yml"},
	{row: 9, files: map[string]string{"H/.yarnrc.yml": "npmRegistryServer: \"${YARN_REG:-https://a9d.example}\"\n"}, host: "a9d.example (443/tcp)", from: "H/.yarnrc.yml"},
	{row: 10, env: map[string]string{"PIP_INDEX_URL": "https://a10.example/simple"}, host: "a10.example (443/tcp)", from: "$PIP_INDEX_URL"},
	{row: 11, env: map[string]string{"PIP_EXTRA_INDEX_URL": "https://a11.example/simple http://a11b.example/simple"}, host: "a11b.example (80/tcp)", from: "$PIP_EXTRA_INDEX_URL"},
	{row: 12, files: map[string]string{"X/pip.ini": "[global]\nindex-url = https://a12.example/simple\n"}, env: map[string]string{"PIP_CONFIG_FILE": "$X/pip.ini"}, host: "a12.example (443/tcp)", from: "X/pip.ini"},
	{row: 13, files: map[string]string{"H/.config/pip/pip.conf": "[install]\nextra-index-url =\n    https://a13.example/simple\n    https://a13b.example/simple\n"}, host: "a13b.example (443/tcp)", from: "H/.config/pip/pip.conf"},
	{row: 13, files: map[string]string{"X/xdg/pip/pip.conf": "[global]\nindex-url=https://a13x.example/simple\n"}, env: map[string]string{"XDG_CONFIG_HOME": "$X/xdg"}, host: "a13x.example (443/tcp)", from: "X/xdg/pip/pip.conf"},
	{row: 14, files: map[string]string{"H/.pip/pip.conf": "[global]\nindex_url = https://a14.example/simple\n"}, host: "a14.example (443/tcp)", from: "H/.pip/pip.conf"},
	{row: 15, files: map[string]string{"R/etc/xdg/pip/pip.conf": "[global]\nindex-url = https://a15.example/simple\n"}, host: "a15.example (443/tcp)", from: "R/etc/xdg/pip/pip.conf"},
	{row: 15, files: map[string]string{"X/d2/pip/pip.conf": "[global]\nindex-url = https://a15d.example/simple\n"}, env: map[string]string{"XDG_CONFIG_DIRS": "$X/d1:$X/d2"}, host: "a15d.example (443/tcp)", from: "X/d2/pip/pip.conf"},
	{row: 16, files: map[string]string{"R/etc/pip.conf": "[global]\nindex-url = https://a16.example/simple\n"}, host: "a16.example (443/tcp)", from: "R/etc/pip.conf"},
	{row: 17, env: map[string]string{"GOPROXY": "https://a17.example,https://a17b.example|direct"}, host: "a17b.example (443/tcp)", from: "$GOPROXY"},
	{row: 18, env: map[string]string{"GOSUMDB": "sum.a18.example+abcdef https://sumdb.a18.example:8443"}, host: "sumdb.a18.example (8443/tcp)", from: "$GOSUMDB"},
	{row: 18, env: map[string]string{"GOSUMDB": "sum.a18b.example+abcdef"}, host: "sum.a18b.example (443/tcp)", from: "$GOSUMDB"},
	{row: 19, files: map[string]string{"H/.config/go/env": "GOPROXY=https://a19.example\n"}, host: "a19.example (443/tcp)", from: "H/.config/go/env"},
	{row: 19, files: map[string]string{"X/goenv": "GOSUMDB=a19g.example\n"}, env: map[string]string{"GOENV": "$X/goenv"}, host: "a19g.example (443/tcp)", from: "X/goenv"},
	{row: 20, files: map[string]string{"X/goroot/go.env": "# defaults\nGOPROXY=https://a20.example,direct\n"}, env: map[string]string{"GOROOT": "$X/goroot"}, host: "a20.example (443/tcp)", from: "X/goroot/go.env"},
	{row: 20, files: map[string]string{"X/sdk/bin/go": "", "X/sdk/go.env": "GOPROXY=https://a20p.example\n"}, exec: []string{"X/sdk/bin/go"}, env: map[string]string{"PATH": "$X/bin"}, host: "a20p.example (443/tcp)", from: "X/sdk/go.env"},
}

// TestDiscoverSources: every userSources entry, with real files in temporary directories,
// yields its host with the file or variable it came from, and no tool default is added
// when no tool is on PATH.
func TestDiscoverSources(t *testing.T) {
	covered := map[int]bool{}
	for i, c := range sourceCases {
		covered[c.row] = true
		root, home, x := t.TempDir(), t.TempDir(), t.TempDir()
		exp := strings.NewReplacer("$R", root, "$H", home, "$X", x, "R/", root+"/", "H/", home+"/", "X/", x+"/")
		for p, content := range c.files {
			writeTestFile(t, exp.Replace(p), content, 0o644)
		}
		for _, p := range c.exec {
			os.Chmod(exp.Replace(p), 0o755)
		}
		if c.row == 20 && strings.Contains(c.from, "sdk") { // go reached through a symbolic link on PATH
			os.MkdirAll(filepath.Join(x, "bin"), 0o755)
			if err := os.Symlink(filepath.Join(x, "sdk/bin/go"), filepath.Join(x, "bin/go")); err != nil {
				t.Fatal(err)
			}
		}
		env := map[string]string{}
		for k, v := range c.env {
			env[k] = exp.Replace(v)
		}
		d := Discoverer{Root: root, Home: home, Getenv: func(k string) string { return env[k] }}
		found, notes := d.Discover(context.Background())
		var hit *Discovered
		for j := range found {
			if found[j].Entry.String() == c.host {
				hit = &found[j]
			}
		}
		src := userSources[c.row]
		if hit == nil {
			t.Errorf("case %d (row %d, %s): %s not found in %v (notes %v)", i, c.row, src.tool, c.host, found, notes)
			continue
		}
		if hit.Tool != src.tool || hit.From != exp.Replace(c.from) || hit.UserControlled != src.user {
			t.Errorf("case %d (row %d): %+v; want tool %s, from %s, user %v", i, c.row, *hit, src.tool, exp.Replace(c.from), src.user)
		}
		for _, f := range found {
			if strings.Contains(f.From, "built-in default") && len(c.exec) == 0 {
				t.Errorf("case %d: default %+v added with no tool on PATH", i, f)
			}
		}
	}
	for row := range userSources {
		if !covered[row] {
			t.Errorf("userSources[%d] (%s) has no case", row, userSources[row].tool)
		}
	}
}

// TestDiscoverDefaults: a tool found on PATH (never run: each fake writes a marker) with
// no registry configured gets its documented default; a configured registry replaces it;
// cmd/go's precedence is the environment, the user env file, then GOROOT/go.env.
func TestDiscoverDefaults(t *testing.T) {
	home, bin, marks := t.TempDir(), t.TempDir(), t.TempDir()
	for _, n := range []string{"npm", "yarn", "pip3", "go"} {
		writeTestFile(t, filepath.Join(bin, n), "#!/bin/sh\ntouch "+filepath.Join(marks, n)+"\n", 0o755)
	}
	env := map[string]string{"PATH": bin}
	d := Discoverer{Root: t.TempDir(), Home: home, Getenv: func(k string) string { return env[k] }}
	got := map[string]string{}
	found, _ := d.Discover(context.Background())
	for _, f := range found {
		got[f.Entry.String()] = f.Tool + " " + f.From
	}
	for host, want := range map[string]string{
		"registry.npmjs.org (443/tcp)":     "npm npm's built-in default registry",
		"registry.yarnpkg.com (443/tcp)":   "yarn yarn's built-in default registry",
		"pypi.org (443/tcp)":               "pip pip's built-in default index-url",
		"files.pythonhosted.org (443/tcp)": "pip pip's built-in default index-url",
		"proxy.golang.org (443/tcp)":       "go go's built-in default GOPROXY",
		"sum.golang.org (443/tcp)":         "go go's built-in default GOSUMDB",
	} {
		if got[host] != want {
			t.Errorf("%s = %q, want %q (all %v)", host, got[host], want, got)
		}
	}
	if m := hostilews.Markers(t, marks); len(m) != 0 {
		t.Errorf("discovery ran tools: %v", m)
	}

	writeTestFile(t, filepath.Join(home, ".npmrc"), "registry=https://npm.corp.example/\n", 0o644)
	writeTestFile(t, filepath.Join(home, ".config/go/env"), "GOPROXY=https://file.corp.example\n", 0o644)
	env["GOPROXY"] = "https://env.corp.example"
	env["PIP_CONFIG_FILE"] = os.DevNull
	writeTestFile(t, filepath.Join(home, ".pip/pip.conf"), "[global]\nindex-url = https://pip.corp.example/\n", 0o644)
	found, _ = d.Discover(context.Background())
	got = map[string]string{}
	for _, f := range found {
		got[f.Entry.Pattern.Name] = f.From
	}
	for _, h := range []string{"registry.npmjs.org", "file.corp.example", "proxy.golang.org", "pip.corp.example"} {
		if _, ok := got[h]; ok {
			t.Errorf("%s found although overridden or disabled: %v", h, got)
		}
	}
	if got["npm.corp.example"] == "" || got["env.corp.example"] != "$GOPROXY" || got["sum.golang.org"] == "" || got["pypi.org"] == "" {
		t.Errorf("configured registries: %v", got)
	}
}

// TestDiscoverWorkspaceFiles: with the home directory inside the workspace, a config file
// there is read only when WorkspaceRisk flags it, and From says it is workspace content;
// one reached through a symbolic link into the workspace is judged the same way, and so
// are the workspace or the home named through a link; a go on a PATH entry inside the
// workspace does not make its go.env read.
func TestDiscoverWorkspaceFiles(t *testing.T) {
	ws, x := t.TempDir(), t.TempDir()
	home := filepath.Join(ws, "home")
	writeTestFile(t, filepath.Join(home, ".npmrc"), "registry=https://npm.corp.example/\n", 0o644)
	writeTestFile(t, filepath.Join(home, ".config/pip/pip.conf"), "[global]\nindex-url = https://pip.corp.example/\n", 0o644)
	writeTestFile(t, filepath.Join(home, ".cargo/config.toml"), "[registries.corp]\nindex = \"https://cargo.corp.example/\"\n", 0o644)
	writeTestFile(t, filepath.Join(ws, "dotfiles/yarnrc"), "registry \"https://yarn.corp.example/\"\n", 0o644)
	writeTestFile(t, filepath.Join(ws, "bin/go"), "", 0o755)
	writeTestFile(t, filepath.Join(ws, "go.env"), "GOPROXY=https://"+hostilews.AttackerHost+"\n", 0o644)
	xhome := filepath.Join(x, "home")
	os.MkdirAll(xhome, 0o755)
	os.Symlink(filepath.Join(ws, "dotfiles/yarnrc"), filepath.Join(xhome, ".yarnrc"))
	risk := func(rel string) string {
		if rel == "home/.npmrc" {
			return "package-manager config"
		}
		return ""
	}
	wsLink := filepath.Join(x, "ws-link") // the workspace named through a symbolic link
	if err := os.Symlink(ws, wsLink); err != nil {
		t.Fatal(err)
	}
	for i, h := range []string{home, xhome, filepath.Join(wsLink, "home")} {
		env := map[string]string{"PATH": filepath.Join(ws, "bin")}
		w := ws
		if i == 1 {
			w = wsLink
		}
		d := Discoverer{Root: t.TempDir(), Home: h, Workspace: w, WorkspaceRisk: risk, Getenv: func(k string) string { return env[k] }}
		found, notes := d.Discover(context.Background())
		got := map[string]string{}
		for _, f := range found {
			got[f.Entry.Pattern.Name] = f.From
		}
		if h != xhome {
			if want := filepath.Join(h, ".npmrc") + " (workspace content; review holds changes to it: package-manager config)"; got["npm.corp.example"] != want {
				t.Errorf("npm.corp.example from %q, want %q", got["npm.corp.example"], want)
			}
			if _, ok := got["cargo.corp.example"]; ok || !hasNote(notes, filepath.Join(h, ".cargo/config.toml")) {
				t.Errorf("unflagged workspace cargo config read: %v; notes %v", got, notes)
			}
			if _, ok := got["pip.corp.example"]; ok || !hasNote(notes, filepath.Join(h, ".config/pip/pip.conf")) {
				t.Errorf("unflagged workspace pip.conf read: %v; notes %v", got, notes)
			}
		} else if _, ok := got["yarn.corp.example"]; ok || !hasNote(notes, filepath.Join(xhome, ".yarnrc")) {
			t.Errorf("~/.yarnrc linked into the workspace read: %v; notes %v", got, notes)
		}
		if _, ok := got[hostilews.AttackerHost]; ok || got["proxy.golang.org"] != "" {
			t.Errorf("go on a workspace PATH entry used: %v", got)
		}
	}
}

func hasNote(notes []Note, sub string) bool {
	for _, n := range notes {
		if strings.Contains(n.What, sub) {
			return true
		}
	}
	return false
}

func TestDiscoverSystemOnly(t *testing.T) {
	root, home := t.TempDir(), t.TempDir()
	writeTestFile(t, filepath.Join(root, "etc/apt/sources.list"), "deb http://deb.mirror.example/debian bookworm main\n", 0o644)
	writeTestFile(t, filepath.Join(root, "etc/npmrc"), "registry=https://npm.corp.example/\n", 0o644)
	writeTestFile(t, filepath.Join(home, ".npmrc"), "registry=https://user.example/\n", 0o644)
	d := Discoverer{Root: root, Home: home, SystemOnly: true,
		Getenv: func(string) string { return "https://env.example/" }}
	found, _ := d.Discover(context.Background())
	var got []string
	for _, f := range found {
		if f.UserControlled {
			t.Errorf("user-controlled discovery %+v", f)
		}
		got = append(got, f.Entry.String())
	}
	if strings.Join(got, ",") != "deb.mirror.example (80/tcp),npm.corp.example (443/tcp)" {
		t.Errorf("found %v", got)
	}
}

func TestDiscoverApt(t *testing.T) {
	root := t.TempDir()
	writeTestFile(t, filepath.Join(root, "etc/apt/sources.list"), "# deb http://commented.example/x stable main\ndeb [arch=amd64 signed-by=/k.gpg] http://deb.mirror.example/debian bookworm main\ndeb-src https://src.mirror.example:8443/debian bookworm main\ndeb http://10.0.0.1/debian bookworm main\n", 0o644)
	writeTestFile(t, filepath.Join(root, "etc/apt/sources.list.d/a.sources"), "Types: deb\nURIs: http://sec.mirror.example/debian-security\nSuites: x\n\nTypes: deb\nEnabled: no\nURIs: https://disabled.example/\n", 0o644)
	writeTestFile(t, filepath.Join(root, "etc/apt/sources.list.d/b.list.disabled"), "deb https://ignored.example/ x main\n", 0o644)
	writeTestFile(t, filepath.Join(root, "home/.cargo/config.toml"), "[registries.corp]\nindex = \"sparse+https://crates.corp.example/index/\"\n[source.mirror]\nregistry = \"https://crates-mirror.corp.example/\"\n", 0o644)
	d := Discoverer{Root: root, Home: filepath.Join(root, "home"), Getenv: func(string) string { return "" }}
	found, notes := d.Discover(context.Background())
	var got []string
	for _, f := range found {
		got = append(got, f.Tool+" "+f.Entry.String())
	}
	want := "apt deb.mirror.example (80/tcp),apt sec.mirror.example (80/tcp),apt src.mirror.example (8443/tcp),cargo crates-mirror.corp.example (443/tcp),cargo crates.corp.example (443/tcp)"
	if strings.Join(got, ",") != want {
		t.Errorf("found %v, want %s", got, want)
	}
	if !hasNote(notes, "10.0.0.1") {
		t.Errorf("IP-address source not noted: %v", notes)
	}
}

// TestDiscoverHostileWorkspace runs discovery for real, with the real environment, in a
// child process whose current directory is a workspace planted with every
// hostilews.Members entry and whose PATH starts with the workspace's bin directories (and
// "."), the real tools after them: nothing planted runs, no attacker host is found, and the
// user's own ~/.npmrc and GOPROXY still are.
func TestDiscoverHostileWorkspace(t *testing.T) {
	if os.Getenv("BROOD_TEST_DISCOVER_CHILD") == "1" {
		found, notes := Discoverer{Workspace: "."}.Discover(context.Background())
		for _, f := range found {
			fmt.Printf("found\t%s\t%s\n", f.Entry.Pattern.Name, f.From)
		}
		for _, n := range notes {
			fmt.Printf("note\t%s\t%s\n", n.What, n.Why)
		}
		return
	}
	ws, home, marks := t.TempDir(), t.TempDir(), t.TempDir()
	hostilews.Plant(t, ws, marks)
	writeTestFile(t, filepath.Join(home, ".npmrc"), "registry=https://npm.corp.example/\n", 0o644)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestDiscoverHostileWorkspace$")
	cmd.Dir = ws
	path := strings.Join(append(hostilews.PathDirs(ws), os.Getenv("PATH")), ":")
	cmd.Env = []string{"BROOD_TEST_DISCOVER_CHILD=1", "HOME=" + home, "PATH=" + path, "GOPROXY=https://goproxy.corp.example",
		"VIRTUAL_ENV=" + filepath.Join(ws, ".venv"), "PIP_CONFIG_FILE=" + filepath.Join(ws, "pip.conf")}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if m := hostilews.Markers(t, marks); len(m) != 0 {
		t.Errorf("planted code ran: %v", m)
	}
	if strings.Contains(string(out), hostilews.AttackerHost) {
		t.Errorf("attacker host discovered:\n%s", out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Split(line, "\t"); len(f) == 3 && f[0] == "found" {
			got[f[1]] = f[2]
		}
	}
	if got["npm.corp.example"] != filepath.Join(home, ".npmrc") || got["goproxy.corp.example"] != "$GOPROXY" {
		t.Errorf("the user's own registries were not discovered: %v", got)
	}
}

// BenchmarkDiscover measures discovery against this machine's real configuration (file
// reads only).
func BenchmarkDiscover(b *testing.B) {
	for b.Loop() {
		Discoverer{Workspace: b.TempDir()}.Discover(context.Background())
	}
}

// TestDiscoverWorkspaceLinkNotFollowed: a flagged configuration file inside the workspace
// that is a symbolic link (to a file of the developer's outside it) is not read, and a
// note names it as a link.
func TestDiscoverWorkspaceLinkNotFollowed(t *testing.T) {
	ws, x := t.TempDir(), t.TempDir()
	home := filepath.Join(ws, "home")
	secret := filepath.Join(x, "secret-npmrc")
	writeTestFile(t, secret, "registry=https://secret.corp.example/\n", 0o600)
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(home, ".npmrc")); err != nil {
		t.Fatal(err)
	}
	risk := func(rel string) string { return "package-manager config" }
	d := Discoverer{Root: t.TempDir(), Home: home, Workspace: ws, WorkspaceRisk: risk, Getenv: func(string) string { return "" }}
	found, notes := d.Discover(context.Background())
	for _, f := range found {
		if f.Entry.Pattern.Name == "secret.corp.example" {
			t.Errorf("a linked workspace .npmrc was followed: %+v", f)
		}
	}
	named := false
	for _, n := range notes {
		named = named || (strings.Contains(n.What, filepath.Join(home, ".npmrc")) && strings.Contains(n.Why, "is a symlink"))
	}
	if !named {
		t.Errorf("no note names the link: %v", notes)
	}
}
