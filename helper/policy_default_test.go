package helper

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy"
	"brood.dev/brood/netpolicy/nftrules"
)

// TestDefaultProfileIsEnforced: an agent run without --egress (StartVMArgs.Egress =
// api.EgressDefault, what `brood run AGENT` sends) gets a network whose profile is the
// system policy's default_profile, else standard, capped by max_profile; resolve_policy
// (what `brood policy show --agent` asks) answers the same profile, source, hosts and
// digest the session enforces (and the session names the provider's hosts), because
// both go through the one resolve function. A request with no Egress gets no network at
// all. The policy file is rewritten between cases: the helper reads it at every
// resolution. It runs in a network namespace of its own; sessions stay up until the end,
// each on its own address slot with a veth into a guest namespace of its own.
func TestDefaultProfileIsEnforced(t *testing.T) {
	if os.Getenv(policyNetnsEnv) == "" {
		testenv.RequireRoot(t)
		testenv.RequireCommand(t, "ip")
		testenv.RerunInNetns(t, testenv.NewNetns(t, "d"), "TestDefaultProfileIsEnforced", []string{policyNetnsEnv + "=1"})
		return
	}
	policy := writeRootPolicy(t, "")
	taps := &guestTaps{t: t}
	var eg *egress.Manager
	var srv *Server
	ts := startServerWith(t, func(c *Config) {
		c.Egress.PolicyPath = policy
		c.Egress.Upstream = "127.0.0.53:53"
	}, func(s *Server) {
		var err error
		if eg, err = egress.New(s.cfg.Egress, t.TempDir(), taps, &nftrules.Fake{}, nil, discardLog()); err != nil {
			t.Fatal(err)
		}
		eg.Discover = func() []netpolicy.Discovered { return nil }
		s.EnableEgress(eg)
		srv = s
	})
	t.Cleanup(eg.StopAll)
	for i, c := range []struct {
		policy, egress         string
		profile, layer, source string
	}{
		{"", api.EgressDefault, "standard", "default", netpolicy.ProfileBuiltin},
		{"default_profile = \"locked\"\n", api.EgressDefault, "locked", "system", netpolicy.ProfileFromDefault},
		{"max_profile = \"locked\"\n", api.EgressDefault, "locked", "system", netpolicy.ProfileFromCap},
		{"default_profile = \"locked\"\n", "standard", "standard", "flags", ""},
	} {
		if err := os.WriteFile(policy, []byte(c.policy), 0o644); err != nil {
			t.Fatal(err)
		}
		start := api.StartVMArgs{ID: "0000d0f" + string(rune('0'+i)), Egress: c.egress, Agent: "codex"}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		pol, err := ts.dial(t).ResolvePolicy(ctx, start.PolicyArgs())
		cancel()
		if err != nil {
			t.Fatalf("%q: resolve_policy: %v", c.policy, err)
		}
		if pol.Profile != c.profile || pol.ProfileLayer != c.layer || pol.ProfileSource != c.source {
			t.Errorf("%q egress %q: resolve_policy profile %s by %s (%s), want %s by %s (%s)", c.policy, c.egress,
				pol.Profile, pol.ProfileLayer, pol.ProfileSource, c.profile, c.layer, c.source)
		}
		sess, err := srv.startEgress(&sessionRecord{Session: api.Session{ID: start.ID}}, start)
		if err != nil || sess == nil {
			t.Fatalf("%q: start egress: %v, %v", c.policy, sess, err)
		}
		var shown, provider []string
		for _, h := range pol.Hosts {
			shown = append(shown, h.Name+" ("+strings.Join(h.Ports, ", ")+")")
			if h.Layer == "agent" {
				provider = append(provider, shown[len(shown)-1])
			}
		}
		slices.Sort(shown)
		slices.Sort(provider)
		if len(provider) == 0 || !slices.Equal(provider, sess.Info.AgentHosts) {
			t.Errorf("%q: session provider hosts %v; resolve_policy's agent layer %v", c.policy, sess.Info.AgentHosts, provider)
		}
		if sess.Info.Profile != pol.Profile || sess.Info.Digest != pol.Digest || !slices.Equal(shown, sess.Info.Hosts) {
			t.Errorf("%q: session enforces %s %s %v; resolve_policy %s %s %v", c.policy,
				sess.Info.Profile, sess.Info.Digest, sess.Info.Hosts, pol.Profile, pol.Digest, shown)
		}
	}
	if sess, err := srv.startEgress(&sessionRecord{Session: api.Session{ID: "0000d0ff"}}, api.StartVMArgs{ID: "0000d0ff", Agent: "codex"}); sess != nil || err != nil {
		t.Errorf("no Egress: session network %v, %v; want none", sess, err)
	}
	os.WriteFile(policy, []byte("max_profile = \"locked\"\ndefault_profile = \"standard\"\n"), 0o644)
	if _, err := srv.startEgress(&sessionRecord{Session: api.Session{ID: "0000d0fe"}}, api.StartVMArgs{ID: "0000d0fe", Egress: api.EgressDefault}); !errors.Is(err, api.ErrPolicy) {
		t.Errorf("default_profile looser than max_profile: %v, want a policy refusal", err)
	}
}

// guestTaps gives each session a veth into a guest namespace of its own (vethTaps, whose
// peer is always eth0, serves one session per namespace).
type guestTaps struct{ t *testing.T }

func (g *guestTaps) CreateTap(name string, uid, gid uint32, addrs []netip.Prefix) (*os.File, error) {
	return vethTaps{g.t, testenv.NewNetns(g.t, "g")}.CreateTap(name, uid, gid, addrs)
}
func (*guestTaps) DeleteLink(string) error              { return nil }
func (*guestTaps) ListTaps(string) ([]string, error)    { return nil, nil }
func (*guestTaps) DefaultRouteLinks() ([]string, error) { return nil, nil }
func (*guestTaps) EnableForwarding(string) error        { return nil }
