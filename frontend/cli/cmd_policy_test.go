package cli

import (
	"bytes"
	"context"
	"encoding/json"
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

// TestEgressFlagsApply: the flags' StartVM egress for an agent run and for shell or
// run-image: no --egress is the helper's default network for an agent and none
// otherwise, --egress none is none for both, a profile is that profile; --allow-host
// without a network and malformed values are usage errors.
func TestEgressFlagsApply(t *testing.T) {
	for _, c := range []struct {
		f          egressFlags
		agent      bool
		wantErr    bool
		wantEgress string
	}{
		{egressFlags{}, false, false, ""},
		{egressFlags{}, true, false, api.EgressDefault},
		{egressFlags{profile: "none"}, true, false, ""},
		{egressFlags{profile: "none"}, false, false, ""},
		{egressFlags{allowHosts: []string{"a.example"}}, true, false, api.EgressDefault},
		{egressFlags{profile: "locked", allowHosts: []string{"a.example", "*.b.example:22"}}, false, false, "locked"},
		{egressFlags{profile: "standard"}, true, false, "standard"},
		{egressFlags{allowHosts: []string{"a.example"}}, false, true, ""},                 // no network to allow it on
		{egressFlags{profile: "none", allowHosts: []string{"a.example"}}, true, true, ""}, // nor here
		{egressFlags{profile: "default"}, true, true, ""},                                 // not a profile name
		{egressFlags{profile: "open"}, false, true, ""},
		{egressFlags{profile: "locked", allowHosts: []string{"*a.example"}}, false, true, ""},
		{egressFlags{profile: "locked", allowHosts: []string{"1.2.3.4}"}}, false, true, ""},
	} {
		var a api.StartVMArgs
		err := c.f.apply(&a, c.agent)
		if (err != nil) != c.wantErr {
			t.Errorf("apply(%+v, agent %v) = %v, want error %v", c.f, c.agent, err, c.wantErr)
			continue
		}
		var ee *exitError
		if err != nil && (!errors.As(err, &ee) || ee.code != ExitUsage) {
			t.Errorf("apply(%+v) = %v, want a usage error", c.f, err)
		}
		if err == nil && (a.Egress != c.wantEgress || !slices.Equal(a.AllowHosts, c.f.allowHosts)) {
			t.Errorf("apply(%+v, agent %v) set %q %v, want %q", c.f, c.agent, a.Egress, a.AllowHosts, c.wantEgress)
		}
	}
}

// noHelper points the helper socket at a path where nothing listens, so policy show
// computes locally whatever runs on this machine.
func noHelper(t *testing.T) {
	t.Setenv(api.SocketEnv, filepath.Join(t.TempDir(), "no-helper.sock"))
}

// policyShow runs `brood policy show ARGS` and returns its output and exit code.
func policyShow(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	root := NewRootCommand()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"policy", "show"}, args...))
	err := root.Execute()
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return out.String() + err.Error(), ee.code
	case err != nil:
		return out.String() + err.Error(), ExitError
	}
	return out.String(), ExitOK
}

// TestPolicyShowLocalLayers: without a helper, policy show says so on its first line and
// merges the user config, the workspace's .brood.toml and the flags itself.
func TestPolicyShowLocalLayers(t *testing.T) {
	noHelper(t)
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	os.MkdirAll(filepath.Join(cfg, "brood"), 0o700)
	writeFile(t, filepath.Join(cfg, "brood"), "config.toml", "[agents.x]\nimage = \"test\"\ncommand = [\"x\"]\n[egress]\nprofile = \"standard\"\nallow_hosts = [\"mirror.example.org\"]\n")
	ws := t.TempDir()
	writeFile(t, ws, ".brood.toml", "[egress]\ndeny_hosts = [\"*.paste.example\"]\n")
	sys := filepath.Join(t.TempDir(), "no-policy.toml")
	args := []string{"--system-policy", sys, "--workspace", ws, "--agent", "claude-code", "--egress", "locked", "--allow-host", "extra.example:8443"}
	out, code := policyShow(t, args...)
	if code != 0 || !strings.HasPrefix(out, notFromHelper+"cannot ask the helper") {
		t.Fatalf("exit %d, first line not labelled:\n%s", code, out)
	}
	for _, want := range []string{"locked\t(flags)", "api.anthropic.com (443/tcp)\t(agent (claude-code))",
		"mirror.example.org (443/tcp)\t(user)", "extra.example (8443/tcp)\t(flags)", "*.paste.example\t(workspace)", "digest\tsha256:", "(system policy none)"} {
		if !strings.Contains(out, want) {
			t.Errorf("policy show lacks %q:\n%s", want, out)
		}
	}
	js, code := policyShow(t, append(args, "--json")...)
	var got shownPolicy
	if err := json.Unmarshal([]byte(js), &got); err != nil || code != 0 || got.FromHelper || !strings.HasPrefix(got.NotFromHelper, notFromHelper) ||
		got.Profile != "locked" || !strings.HasPrefix(got.Digest, "sha256:") || len(got.Hosts) != 3 ||
		got.Hosts[0].Name != "api.anthropic.com" || got.Hosts[0].Layer != "agent" || got.Hosts[0].Source != "claude-code" || got.Hosts[0].Ports[0] != "443/tcp" {
		t.Errorf("--json: exit %d %v\n%s", code, err, js)
	}
	if !strings.Contains(js, `"from_helper": false`) || !strings.Contains(js, `"name": "extra.example"`) {
		t.Errorf("--json field names:\n%s", js)
	}

	// A workspace may not add hosts; a malformed layer is an error, not ignored.
	writeFile(t, ws, ".brood.toml", "[egress]\nallow_hosts = [\"x.example\"]\n")
	if out, code := policyShow(t, "--system-policy", sys, "--workspace", ws); code != ExitRefused || !strings.Contains(out, "x.example") {
		t.Errorf("workspace adding a host: exit %d\n%s", code, out)
	}
	writeFile(t, ws, ".brood.toml", "[egress]\nprofile = \"wide-open\"\n")
	if out, code := policyShow(t, "--system-policy", sys, "--workspace", ws); code == 0 || !strings.Contains(out, ".brood.toml") {
		t.Errorf("malformed workspace profile: exit %d\n%s", code, out)
	}
}

// TestWorkspaceConfigUnknownKey: .brood.toml is decoded as strictly as config.toml: an
// unknown key fails policy show and brood run (before any session) with the key's name
// and the file's.
func TestWorkspaceConfigUnknownKey(t *testing.T) {
	noHelper(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	ws := t.TempDir()
	path := writeFile(t, ws, ".brood.toml", "[egress]\ndeny_host = [\"tracker.example\"]\n")
	out, code := policyShow(t, "--workspace", ws)
	if code == 0 || !strings.Contains(out, "deny_host") || !strings.Contains(out, path) || !strings.Contains(out, "unknown keys") {
		t.Errorf("policy show with an unknown .brood.toml key: exit %d\n%s", code, out)
	}
	writeFile(t, ws, ".brood.toml", "[egres]\nprofile = \"locked\"\n")
	f := newFakeHelper(t)
	code, _, runErr := broodCode(t, "run", "--workspace", ws, "--egress", "locked", "shell", "--", "true")
	if code != ExitUsage || !strings.Contains(runErr, "egres") || !strings.Contains(runErr, path) || strings.Contains(f.Calls(), string(api.CallCreateSession)) {
		t.Errorf("run with an unknown .brood.toml table: exit %d, calls %q\n%s", code, f.Calls(), runErr)
	}
	if _, err := loadWorkspaceConfig(t.TempDir()); err != nil {
		t.Errorf("a workspace without .brood.toml: %v", err)
	}
}

// TestPolicyShowFromHelper: policy show sends the helper exactly the egress inputs brood
// run sends in StartVM (same flags, config files and agent), prints the helper's answer
// (labelled, with its digest, --json from_helper), and brood run prints the digest of the
// policy the helper enforces. A helper that does not know the call gets the labelled
// local computation.
func TestPolicyShowFromHelper(t *testing.T) {
	f := newFakeHelper(t)
	f.Policy = &api.Policy{Profile: "locked", ProfileLayer: "flags", Digest: "sha256:00ab", SystemDigest: "sha256:11cd",
		Hosts: []api.PolicyHost{{Name: "llm.corp.test", Ports: []string{"443/tcp"}, Layer: "agent", Source: "codex"},
			{Name: "evil\x1b[2J.test", Ports: []string{"443/tcp"}, Layer: "flags"}}}
	f.VMEgress = &api.EgressInfo{Profile: "locked", GuestV4: "10.213.0.2/30", Hosts: []string{"llm.corp.test (443/tcp)"}, Digest: "sha256:00ab"}
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	os.MkdirAll(filepath.Join(cfg, "brood"), 0o700)
	writeFile(t, filepath.Join(cfg, "brood"), "config.toml", "[egress]\ndeny_hosts = [\"*.paste.example\"]\n")
	ws := t.TempDir()
	writeFile(t, ws, ".brood.toml", "[egress]\nprofile = \"locked\"\n")
	flags := []string{"--workspace", ws, "--egress", "locked", "--allow-host", "extra.example:8443"}

	out, code := policyShow(t, append(flags, "--agent", "codex")...)
	if code != 0 || !strings.HasPrefix(out, "from the helper at "+api.SocketPath()+"\n") || !strings.Contains(out, "llm.corp.test (443/tcp)\t(agent (codex))") ||
		!strings.Contains(out, "digest\tsha256:00ab\t(system policy sha256:11cd)") || strings.Contains(out, "\x1b") {
		t.Errorf("policy show: exit %d\n%s", code, out)
	}
	shown := f.PolicyArgs()
	js, _ := policyShow(t, append(flags, "--agent", "codex", "--json")...)
	var got shownPolicy
	if err := json.Unmarshal([]byte(js), &got); err != nil || !got.FromHelper || got.Digest != "sha256:00ab" || len(got.Hosts) != 2 {
		t.Errorf("--json: %v\n%s", err, js)
	}

	code, runOut, runErr := broodCode(t, append(append([]string{"run"}, flags...), "codex")...)
	if code != 0 || !strings.Contains(runOut, "policy sha256:00ab") {
		t.Errorf("run: exit %d, the enforced digest not printed:\n%s%s", code, runOut, runErr)
	}
	sent, _ := json.Marshal(shown)
	started, _ := json.Marshal(f.StartArgs().PolicyArgs())
	if string(sent) != string(started) || shown.Agent != "codex" || shown.UserEgress == nil || shown.WorkspaceEgress == nil {
		t.Errorf("policy show asked for\n%s\nbrood run started\n%s", sent, started)
	}

	f.Policy = nil
	if out, code := policyShow(t, flags...); code != 0 || !strings.HasPrefix(out, notFromHelper+"the helper at "+api.SocketPath()+" cannot resolve policies") {
		t.Errorf("helper without resolve_policy: exit %d\n%s", code, out)
	}
}

func TestPolicyShowSystemForbidsAllowHost(t *testing.T) {
	testenv.RequireRoot(t) // the system policy must be root-owned
	noHelper(t)
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

	noHelper(t)
	disc, _ := discoverAll(context.Background(), t.TempDir())
	l := withUserDiscovered(&api.EgressLayer{Profile: "standard"}, disc)
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
