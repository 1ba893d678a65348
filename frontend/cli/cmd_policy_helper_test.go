package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/helper"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy"
	"brood.dev/brood/netpolicy/nftrules"
	"brood.dev/brood/sandbox"
)

// startRealHelper serves the real helper (package helper's Server with its egress layer
// on a fake firewall and no taps) in this process on a temporary socket, with the
// configuration mutate makes and discover as its discovery of the host's system
// registries, and points BROOD_HELPER_SOCKET at it. No session is started on it.
func startRealHelper(t *testing.T, mutate func(*helper.Config), discover func() []netpolicy.Discovered) string {
	t.Helper()
	cfg := helper.DefaultConfig()
	cfg.AllowGroup, cfg.AllowUIDs, cfg.IdleSeconds = "", []uint32{uint32(os.Getuid())}, 0
	cfg.Egress.Upstream = "127.0.0.1:53"
	mutate(&cfg)
	if err := cfg.Validate(func(string) {}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := helper.NewServer(&cfg, log, api.Capabilities{Helper: "test", Accel: sandbox.AccelTCG, Policy: "none"}, nil)
	eg, err := egress.New(cfg.Egress, t.TempDir(), noTaps{}, &nftrules.Fake{}, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	eg.Discover = discover
	srv.EnableEgress(eg)
	sock := filepath.Join(t.TempDir(), "helper.sock")
	ln, err := helper.ListenPath(sock, -1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("helper did not stop")
		}
	})
	t.Setenv(api.SocketEnv, sock)
	return sock
}

// noTaps is a helper.TapLinks for a helper that starts no session.
type noTaps struct{}

func (noTaps) CreateTap(string, uint32, uint32, []netip.Prefix) (*os.File, error) {
	return nil, os.ErrPermission
}
func (noTaps) DeleteLink(string) error              { return nil }
func (noTaps) ListTaps(string) ([]string, error)    { return nil, nil }
func (noTaps) DefaultRouteLinks() ([]string, error) { return nil, nil }
func (noTaps) EnableForwarding(string) error        { return nil }

// showJSON runs `brood policy show --json ARGS` and decodes it.
func showJSON(t *testing.T, args ...string) shownPolicy {
	t.Helper()
	out, code := policyShow(t, append(args, "--json")...)
	var p shownPolicy
	if err := json.Unmarshal([]byte(out), &p); err != nil || code != 0 {
		t.Fatalf("policy show %v: exit %d, %v\n%s", args, code, err, out)
	}
	return p
}

// TestPolicyShowRealHelper: with the real helper configured to give claude-code its own
// provider host and to read a non-default system policy, `brood policy show` lists the
// helper's hosts (not the built-in table's, which a local computation would show) and the
// digest the helper computes for a session. With the same configuration the helper and
// the local computation agree field for field, digest included: the local fallback and
// its rendering have not drifted from the helper's.
func TestPolicyShowRealHelper(t *testing.T) {
	testenv.RequireRoot(t) // a system policy must be root-owned
	policy := writeFile(t, t.TempDir(), "policy.toml", "deny_hosts = [\"*.bad.test\"]\n[[host]]\nname = \"sys.corp.test\"\nports = [\"443\", \"8443\"]\n")
	root, home := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc", "apt"), 0o755)
	writeFile(t, filepath.Join(root, "etc", "apt"), "sources.list", "deb http://deb.corp.test/debian bookworm main\n")
	writeFile(t, home, ".npmrc", "registry=https://npm.corp.test/\n")
	old := userDiscoverer
	t.Cleanup(func() { userDiscoverer = old })
	userDiscoverer = func(string) netpolicy.Discoverer {
		return netpolicy.Discoverer{Root: root, Home: home, Getenv: func(string) string { return "" }}
	}
	systemOnly := func() []netpolicy.Discovered {
		d, _ := netpolicy.Discoverer{Root: root, Home: home, Getenv: func(string) string { return "" }, SystemOnly: true}.Discover(context.Background())
		return d
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	ws := t.TempDir()
	writeFile(t, ws, ".brood.toml", "[egress]\ndeny_hosts = [\"github.com\"]\n")
	args := []string{"--workspace", ws, "--agent", "claude-code", "--system-policy", policy}

	sock := startRealHelper(t, func(c *helper.Config) {
		c.Egress.PolicyPath = policy
		c.Egress.Agents = map[string][]string{"claude-code": {"llm.corp.test"}}
	}, systemOnly)
	got := showJSON(t, append(args, "--egress", "locked")...)
	var names []string
	for _, h := range got.Hosts {
		names = append(names, h.Name+" "+h.Layer)
	}
	if !got.FromHelper || got.Helper != sock || !slices.Equal(names, []string{"llm.corp.test agent", "sys.corp.test system"}) {
		t.Errorf("from the helper: %+v", got)
	}
	c, err := api.Dial(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	direct, err := c.ResolvePolicy(context.Background(), api.ResolvePolicyArgs{Egress: "locked", Agent: "claude-code",
		WorkspaceEgress: &api.EgressLayer{DenyHosts: []string{"github.com"}}})
	if err != nil || direct.Digest != got.Digest {
		t.Errorf("policy show digest %s, the helper's for the same inputs %s (%v)", got.Digest, direct.Digest, err)
	}
	// A workspace adding a host: the helper refuses, and policy show exits as brood run would.
	loose := t.TempDir()
	writeFile(t, loose, ".brood.toml", "[egress]\nallow_hosts = [\"x.example\"]\n")
	if out, code := policyShow(t, "--workspace", loose, "--egress", "locked"); code != ExitRefused || !strings.Contains(out, "resolve egress policy") {
		t.Errorf("a loosening workspace through the helper: exit %d\n%s", code, out)
	}
	noHelper(t)
	local := showJSON(t, append(args, "--egress", "locked")...)
	if local.FromHelper || local.Digest == got.Digest || local.Hosts[0].Name != "api.anthropic.com" {
		t.Errorf("local computation with the built-in agent table: %+v", local)
	}

	// Built-in agent table on both sides: the same answer.
	startRealHelper(t, func(c *helper.Config) { c.Egress.PolicyPath = policy }, systemOnly)
	for _, profile := range []string{"locked", "standard"} {
		fromHelper := showJSON(t, append(args, "--egress", profile)...)
		noHelper(t)
		local := showJSON(t, append(args, "--egress", profile)...)
		if !fromHelper.FromHelper || local.FromHelper {
			t.Fatalf("sources: helper %v, local %v", fromHelper.FromHelper, local.FromHelper)
		}
		layers := map[string]string{}
		for _, h := range fromHelper.Hosts {
			layers[h.Name] = h.Layer
		}
		if profile == "standard" && (layers["deb.corp.test"] != "discovered" || layers["npm.corp.test"] != "discovered" || layers["github.com"] != "") {
			t.Errorf("standard from the helper lacks the discovered registries or keeps a denied host: %v", layers)
		}
		a, _ := json.Marshal(fromHelper.Policy)
		b, _ := json.Marshal(local.Policy)
		if string(a) != string(b) {
			t.Errorf("%s: the helper answers\n%s\nthe local computation\n%s", profile, a, b)
		}
		startRealHelper(t, func(c *helper.Config) { c.Egress.PolicyPath = policy }, systemOnly)
	}
}
