package frontend

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEgressFlagsApply(t *testing.T) {
	for _, c := range []struct {
		f       egressFlags
		wantErr bool
	}{
		{egressFlags{}, false},
		{egressFlags{profile: "locked", allowHosts: []string{"a.example", "*.b.example:22"}}, false},
		{egressFlags{allowHosts: []string{"a.example"}}, true}, // no network to allow it on
		{egressFlags{profile: "open"}, true},
		{egressFlags{profile: "locked", allowHosts: []string{"*a.example"}}, true},
		{egressFlags{profile: "locked", allowHosts: []string{"1.2.3.4}"}}, true},
	} {
		var a api.StartVMArgs
		err := c.f.apply(&a)
		if (err != nil) != c.wantErr {
			t.Errorf("apply(%+v) = %v, want error %v", c.f, err, c.wantErr)
			continue
		}
		var ee *exitError
		if err != nil && (!errors.As(err, &ee) || ee.code != ExitUsage) {
			t.Errorf("apply(%+v) = %v, want a usage error", c.f, err)
		}
		if err == nil && (a.Egress != c.f.profile || !slices.Equal(a.AllowHosts, c.f.allowHosts)) {
			t.Errorf("apply(%+v) set %q %v", c.f, a.Egress, a.AllowHosts)
		}
	}
}

func TestEffectivePolicyLayers(t *testing.T) {
	dir := t.TempDir()
	user := writeFile(t, dir, "config.toml", "[agents.x]\nimage = \"test\"\n[egress]\nprofile = \"standard\"\nallow_hosts = [\"mirror.example.org\"]\n")
	ws := t.TempDir()
	writeFile(t, ws, ".brood.toml", "[egress]\ndeny_hosts = [\"*.paste.example\"]\n")
	flags := &egressFlags{profile: "locked", allowHosts: []string{"extra.example:8443"}}
	eff, err := effectivePolicy(filepath.Join(dir, "no-policy.toml"), user, ws, "claude-code", flags, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := eff.String()
	for _, want := range []string{"locked\t(flags)", "api.anthropic.com (443/tcp)\t(agent (claude-code))",
		"mirror.example.org", "(user)", "extra.example (8443/tcp)\t(flags)", "*.paste.example", "(workspace)"} {
		if !strings.Contains(out, want) {
			t.Errorf("policy show lacks %q:\n%s", want, out)
		}
	}

	// The same layers as sent to the helper.
	u, w, err := egressLayers(user, ws)
	if err != nil || u == nil || u.Profile != "standard" || len(u.AllowHosts) != 1 || w == nil || len(w.DenyHosts) != 1 {
		t.Errorf("egressLayers = %+v, %+v, %v", u, w, err)
	}
	if u, w, err := egressLayers(filepath.Join(dir, "none.toml"), dir); u != nil || w != nil || err != nil {
		t.Errorf("egressLayers without files = %+v, %+v, %v", u, w, err)
	}

	// A workspace may not add hosts.
	writeFile(t, ws, ".brood.toml", "[egress]\nallow_hosts = [\"x.example\"]\n")
	if _, err := effectivePolicy(filepath.Join(dir, "no-policy.toml"), user, ws, "shell", &egressFlags{}, nil); !errors.Is(err, netpolicy.ErrLoosen) {
		t.Errorf("workspace adding a host: %v, want ErrLoosen", err)
	}
	// A malformed layer is an error, not ignored.
	writeFile(t, ws, ".brood.toml", "[egress]\nprofile = \"wide-open\"\n")
	if _, err := effectivePolicy(filepath.Join(dir, "no-policy.toml"), user, ws, "shell", &egressFlags{}, nil); err == nil {
		t.Error("malformed workspace profile accepted")
	}
}

func TestPolicyShowSystemForbidsAllowHost(t *testing.T) {
	testenv.RequireRoot(t) // the system policy must be root-owned
	dir := t.TempDir()
	sys := writeFile(t, dir, "policy.toml", "forbid_allow_host = true\nmax_profile = \"standard\"\n")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"--egress", "locked"}, 0, "locked\t(flags)"},
		{nil, 0, noEgressNote + "\nprofile"},
		{[]string{"--egress", "locked", "--allow-host", "a.example"}, ExitRefused, ""},
		{[]string{"--egress", "permissive"}, ExitRefused, ""},
	} {
		var out bytes.Buffer
		root := NewRootCommand()
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"policy", "show", "--system-policy", sys, "--workspace", dir}, c.args...))
		err := root.Execute()
		code := 0
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		} else if err != nil {
			code = 1
		}
		if c.args != nil && strings.Contains(out.String(), noEgressNote) {
			t.Errorf("policy show %v says there is no network: %q", c.args, out.String())
		}
		if code != c.code || !strings.Contains(out.String(), c.out) {
			t.Errorf("policy show %v: code %d (%v), output %q; want code %d containing %q", c.args, code, err, out.String(), c.code, c.out)
		}
	}
}

// TestUserRegistries: registries in the user's own tool configuration (here ~/.npmrc and
// PIP_INDEX_URL, no tools installed) go to the helper in the user layer and appear in
// `brood policy show` under standard with the file or variable they came from; locked
// leaves them out.
func TestUserRegistries(t *testing.T) {
	home := t.TempDir()
	writeFile(t, home, ".npmrc", "registry=https://npm.corp.test/\n@acme:registry=https://acme.corp.test:8443/npm/\n")
	env := map[string]string{"HOME": home, "PIP_INDEX_URL": "https://pypi.corp.test/simple"}
	old := userDiscoverer
	t.Cleanup(func() { userDiscoverer = old })
	userDiscoverer = func(string) netpolicy.Discoverer {
		return netpolicy.Discoverer{Root: t.TempDir(), Home: home, Getenv: func(k string) string { return env[k] }}
	}

	l := withUserDiscovered(context.Background(), &api.EgressLayer{Profile: "standard"}, t.TempDir())
	got := map[string]api.EgressDiscovered{}
	for _, d := range l.Discovered {
		got[d.Name] = d
	}
	if d := got["npm.corp.test"]; d.Tool != "npm" || d.From != filepath.Join(home, ".npmrc") {
		t.Errorf("npm.corp.test = %+v (all: %+v)", d, l.Discovered)
	}
	if d := got["acme.corp.test"]; len(d.Ports) != 1 || d.Ports[0] != "8443/tcp" {
		t.Errorf("acme.corp.test = %+v", d)
	}
	if d := got["pypi.corp.test"]; d.Tool != "pip" || !strings.Contains(d.From, "PIP_INDEX_URL") {
		t.Errorf("pypi.corp.test = %+v", d)
	}
	if l.Profile != "standard" {
		t.Errorf("the user layer's own fields were lost: %+v", l)
	}

	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	for _, c := range []struct {
		profile string
		want    bool
	}{{"standard", true}, {"locked", false}} {
		var out bytes.Buffer
		root := NewRootCommand()
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs([]string{"policy", "show", "--system-policy", filepath.Join(dir, "none.toml"), "--workspace", dir, "--egress", c.profile})
		if err := root.Execute(); err != nil {
			t.Fatalf("policy show --egress %s: %v\n%s", c.profile, err, out.String())
		}
		line := "npm.corp.test (443/tcp)\t(discovered (npm: " + filepath.Join(home, ".npmrc") + "))"
		if strings.Contains(out.String(), line) != c.want || strings.Contains(out.String(), "pypi.corp.test") != c.want {
			t.Errorf("policy show --egress %s (want registries: %v):\n%s", c.profile, c.want, out.String())
		}
	}
}

// TestShortFrom: a long source text (a deep home path with its workspace label) is cut to
// what the helper accepts, keeping its end and whole runes.
func TestShortFrom(t *testing.T) {
	label := " (workspace content; review holds changes to it: package-manager config)"
	for _, n := range []int{10, 180, 400} {
		from := "/" + strings.Repeat("é", n) + "/.npmrc" + label
		got := shortFrom(from)
		if len(got) > maxFrom || !utf8.ValidString(got) || !strings.HasSuffix(got, "/.npmrc"+label) || (len(from) <= maxFrom) != (got == from) {
			t.Errorf("shortFrom(%d-byte text) = %q (%d bytes)", len(from), got, len(got))
		}
	}
}
