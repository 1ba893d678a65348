package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/helper"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy"
)

// TestRunAgentNetworkByDefault: brood run AGENT (built-in or configured) without --egress
// asks the helper for its default network (api.EgressDefault); --egress none, brood run
// shell and brood run-image ask for none. policy show --agent sends the helper exactly the
// inputs of the run without --egress, says the run has a network, and prints who chose the
// profile (here the system's default_profile, as the helper answers).
func TestRunAgentNetworkByDefault(t *testing.T) {
	f := newFakeHelper(t)
	cfg := t.TempDir()
	os.MkdirAll(filepath.Join(cfg, "brood"), 0o700)
	writeFile(t, filepath.Join(cfg, "brood"), "config.toml", "[agents.aider]\nimage = \"codex\"\ncommand = [\"aider\"]\nenv = [\"OPENAI_API_KEY\"]\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "codex"}, api.EgressDefault},
		{[]string{"run", "aider"}, api.EgressDefault},
		{[]string{"run", "--egress", "none", "codex"}, ""},
		{[]string{"run", "--egress", "locked", "codex"}, "locked"},
		{[]string{"run", "shell", "--", "true"}, ""},
		{[]string{"run", "--egress", "standard", "shell", "--", "true"}, "standard"},
		{[]string{"run-image", "test", "--", "true"}, ""},
	} {
		t.Setenv("XDG_CONFIG_HOME", cfg)
		t.Setenv("BROOD_STATE_DIR", t.TempDir())
		code, _, errs := broodCode(t, append([]string{c.args[0], "--workspace", t.TempDir()}, c.args[1:]...)...)
		if code != 0 || f.StartArgs().Egress != c.want {
			t.Errorf("%v: exit %d (%s), start_vm egress %q, want %q", c.args, code, errs, f.StartArgs().Egress, c.want)
		}
	}
	if code, _, errs := broodCode(t, "run", "--egress", "none", "--allow-host", "a.example", "codex"); code != ExitUsage {
		t.Errorf("--egress none --allow-host: exit %d (%s), want a usage error", code, errs)
	}

	f.Policy = &api.Policy{Profile: "locked", ProfileLayer: "system", ProfileSource: netpolicy.ProfileFromDefault, Digest: "sha256:00ab",
		SystemDigest: "sha256:11cd", Hosts: []api.PolicyHost{{Name: "api.openai.com", Ports: []string{"443/tcp"}, Layer: "agent", Source: "codex"}}}
	ws := t.TempDir()
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	if code, _, errs := broodCode(t, "run", "--workspace", ws, "codex"); code != 0 {
		t.Fatalf("run codex: exit %d (%s)", code, errs)
	}
	started, _ := json.Marshal(f.StartArgs().PolicyArgs())
	out, code := policyShow(t, "--workspace", ws, "--agent", "codex")
	shown, _ := json.Marshal(f.PolicyArgs())
	if string(shown) != string(started) {
		t.Errorf("policy show --agent codex asked for\n%s\nbrood run codex started\n%s", shown, started)
	}
	if code != 0 || !strings.Contains(out, agentNetworkNote+"\nprofile\tlocked\t(system: default_profile)\n") || strings.Contains(out, noEgressNote) {
		t.Errorf("policy show --agent codex: exit %d\n%s", code, out)
	}
	js, _ := policyShow(t, "--workspace", ws, "--agent", "codex", "--json")
	var got shownPolicy
	if err := json.Unmarshal([]byte(js), &got); err != nil || !got.Network || got.ProfileSource != netpolicy.ProfileFromDefault || got.Hosts[0].Layer != "agent" {
		t.Errorf("--json: %v\n%s", err, js)
	}
	js, _ = policyShow(t, "--workspace", ws, "--agent", "codex", "--egress", "none", "--json")
	if err := json.Unmarshal([]byte(js), &got); err != nil || got.Network || f.PolicyArgs().Egress != "" {
		t.Errorf("--egress none --json: network %v, asked egress %q: %v\n%s", got.Network, f.PolicyArgs().Egress, err, js)
	}
	if out, _ := policyShow(t, "--workspace", ws); !strings.Contains(out, noEgressNote) {
		t.Errorf("policy show for the shell lacks the no-network note:\n%s", out)
	}
}

// TestPolicyShowDefaultProfileLocal: without a helper, policy show --agent computes the
// default from the system policy's default_profile (or says it is the built-in default).
func TestPolicyShowDefaultProfileLocal(t *testing.T) {
	noHelper(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := t.TempDir()
	out, code := policyShow(t, "--workspace", dir, "--agent", "codex", "--system-policy", filepath.Join(dir, "absent.toml"))
	if code != 0 || !strings.Contains(out, "profile\tstandard\t(default: built-in default)") || !strings.Contains(out, "api.openai.com (443/tcp)\t(agent (codex))") {
		t.Errorf("no system policy: exit %d\n%s", code, out)
	}
}

// fakeAgentRun runs `brood run ARGS` against f in a fresh workspace and returns the exit
// code and everything printed.
func fakeAgentRun(t *testing.T, args ...string) (int, string) {
	t.Helper()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	code, out, errs := broodCode(t, append([]string{"run", "--workspace", t.TempDir()}, args...)...)
	return code, out + errs
}

// TestRunNamesAgentImageProvider: the run output names the agent, the image with the file
// and digest StartVM reported, the profile and the provider's hosts.
func TestRunNamesAgentImageProvider(t *testing.T) {
	f := newFakeHelper(t)
	f.ImageFile, f.ImageDigest = "codex-0123456789abcdef0123456789abcdef.erofs", "0123456789abcdef0123456789abcdef"
	f.VMEgress = &api.EgressInfo{Profile: "standard", GuestV4: "10.213.0.2/30", Hosts: []string{"api.openai.com (443/tcp)", "github.com (22/tcp, 443/tcp)"},
		AgentHosts: []string{"api.openai.com (443/tcp)"}, Digest: "sha256:00ab"}
	code, out := fakeAgentRun(t, "codex")
	if code != 0 || !strings.Contains(out, "agent codex on image codex (file "+f.ImageFile+", digest "+f.ImageDigest+")") ||
		!strings.Contains(out, "network: profile standard, provider api.openai.com (443/tcp), guest") {
		t.Errorf("exit %d\n%s", code, out)
	}
}

// TestRunEarlyExitHints: an agent that exits non-zero and changes nothing gets its last
// output lines and the likely causes: no API key for its provider in the environment,
// names refused by egress (the session's egress summary), no network (--egress none), an
// image that cannot run the agent (status 127). An agent that changed files, or exited 0,
// gets no hint.
func TestRunEarlyExitHints(t *testing.T) {
	f := newFakeHelper(t)
	f.VMEgress = &api.EgressInfo{Profile: "standard", GuestV4: "10.213.0.2/30", Digest: "sha256:00ab"}
	f.ExitStatus, f.Output = 1, "starting\n\x1b[31mError: stream disconnected\x1b[0m\r\n"

	t.Setenv("OPENAI_API_KEY", "")
	code, out := fakeAgentRun(t, "codex")
	if code != 1 || !strings.Contains(out, "agent codex exited with status 1 and changed nothing; its last output (escaped):\n") ||
		!strings.Contains(out, "  | starting\n  | \\x1b[31mError: stream disconnected\\x1b[0m\n") ||
		!strings.Contains(out, "hint: no API key for codex in your environment: set OPENAI_API_KEY") {
		t.Errorf("no key: exit %d\n%s", code, out)
	}

	t.Setenv("OPENAI_API_KEY", "sk-test")
	f.Egress = &api.EgressSummary{Refused: map[string]int{"chatgpt.com": 2}}
	code, out = fakeAgentRun(t, "codex")
	if code != 1 || strings.Contains(out, "no API key") || !strings.Contains(out, "hint: egress refused chatgpt.com (the session's egress summary, vm.json)") {
		t.Errorf("refused host: exit %d\n%s", code, out)
	}

	f.Egress, f.VMEgress = nil, nil
	code, out = fakeAgentRun(t, "--egress", "none", "codex")
	if code != 1 || !strings.Contains(out, "hint: the VM had no network (--egress none)") {
		t.Errorf("no network: exit %d\n%s", code, out)
	}

	f.VMEgress = &api.EgressInfo{Profile: "standard", GuestV4: "10.213.0.2/30", Digest: "sha256:00ab"}
	f.ExitStatus, f.Output = 127, "-sh: codex: not found\n"
	code, out = fakeAgentRun(t, "codex")
	if code != 127 || !strings.Contains(out, "hint: status 127: the image codex cannot run \"codex\": it lacks the agent or is too old; rebuild it: "+buildCommand("codex")) {
		t.Errorf("not found: exit %d\n%s", code, out)
	}

	f.ExitStatus, f.Output = 132, ""
	code, out = fakeAgentRun(t, "claude-code")
	if code != 132 || !strings.Contains(out, "hint: status 132: the agent died of an illegal instruction (SIGILL)") {
		t.Errorf("SIGILL: exit %d\n%s", code, out)
	}

	f.ExitStatus, f.Output = 2, ""
	code, out = fakeAgentRun(t, "codex")
	if code != 2 || !strings.Contains(out, "(escaped):\n  | ran: exec codex\nhint: no likely cause found") {
		t.Errorf("no cause: exit %d\n%s", code, out)
	}

	f.ExitStatus = 1
	f.Agent = func(share, _ string) { os.WriteFile(filepath.Join(share, "new.txt"), []byte("x\n"), 0o644) }
	if code, out = fakeAgentRun(t, "codex"); code != 1 || strings.Contains(out, "hint:") || strings.Contains(out, "changed nothing") {
		t.Errorf("an agent that changed files got a hint: exit %d\n%s", code, out)
	}
	f.Agent, f.ExitStatus = nil, 0
	if code, out = fakeAgentRun(t, "codex"); code != 0 || strings.Contains(out, "hint:") {
		t.Errorf("exit 0 got a hint: exit %d\n%s", code, out)
	}
}

// TestOutputTail: the tail keeps the last tailBytes, drops blank lines, keeps what a
// carriage-return redraw left on screen, escapes control characters and returns at most n
// lines; nothing written is no lines.
func TestOutputTail(t *testing.T) {
	var tl outputTail
	if got := tl.lines(3); len(got) != 0 {
		t.Errorf("empty tail: %q", got)
	}
	tl.Write([]byte(strings.Repeat("old line\n", tailBytes/9+10)))
	tl.Write([]byte("a\n\n  \nloading 10%\rloading 100%\r\nb\x07\n"))
	got := tl.lines(3)
	if len(tl.buf) > tailBytes || strings.Join(got, "|") != `a|loading 100%|b\a` {
		t.Errorf("lines = %q (kept %d bytes)", got, len(tl.buf))
	}
}

// TestPolicyShowDefaultProfileRealHelper: with the real helper reading a system policy
// that sets default_profile, `brood policy show --agent codex` without --egress shows
// that profile as chosen by default_profile, with a network, and the local computation
// from the same file agrees field for field; the shell shows no network.
func TestPolicyShowDefaultProfileRealHelper(t *testing.T) {
	testenv.RequireRoot(t) // a system policy must be root-owned
	policy := writeFile(t, t.TempDir(), "policy.toml", "max_profile = \"standard\"\ndefault_profile = \"locked\"\n")
	old := userDiscoverer
	t.Cleanup(func() { userDiscoverer = old })
	empty := t.TempDir()
	userDiscoverer = func(string) netpolicy.Discoverer {
		return netpolicy.Discoverer{Root: empty, Home: empty, Getenv: func(string) string { return "" }}
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	args := []string{"--workspace", t.TempDir(), "--agent", "codex", "--system-policy", policy}
	startRealHelper(t, func(c *helper.Config) { c.Egress.PolicyPath = policy }, func() []netpolicy.Discovered { return nil })
	fromHelper := showJSON(t, args...)
	if !fromHelper.FromHelper || !fromHelper.Network || fromHelper.Profile != "locked" || fromHelper.ProfileLayer != "system" ||
		fromHelper.ProfileSource != netpolicy.ProfileFromDefault || len(fromHelper.Hosts) != 1 || fromHelper.Hosts[0].Name != "api.openai.com" {
		t.Errorf("from the helper: %+v", fromHelper)
	}
	if shell := showJSON(t, "--workspace", t.TempDir(), "--system-policy", policy); shell.Network || shell.ProfileSource != netpolicy.ProfileFromDefault {
		t.Errorf("shell: %+v", shell)
	}
	noHelper(t)
	local := showJSON(t, args...)
	a, _ := json.Marshal(fromHelper.Policy)
	b, _ := json.Marshal(local.Policy)
	if local.FromHelper || string(a) != string(b) {
		t.Errorf("the helper answers\n%s\nthe local computation\n%s", a, b)
	}
}

// TestRunEgressUnavailableHint: a helper that cannot give the default network refuses
// StartVM; the hint says how to run the agent without one instead of blaming the image.
func TestRunEgressUnavailableHint(t *testing.T) {
	f := newFakeHelper(t)
	f.StartErr = &api.Error{Code: api.CodeUnavailable, Message: "egress of session 0000abcd: not available on this helper"}
	code, out := fakeAgentRun(t, "codex")
	if code == 0 || !strings.Contains(out, "--egress none runs it without one") || strings.Contains(out, "is the image built") {
		t.Errorf("exit %d\n%s", code, out)
	}
}
