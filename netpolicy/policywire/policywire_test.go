package policywire

import (
	"testing"

	"brood.dev/brood/netpolicy"
)

// TestRender: every allowed host appears once with its ports, layer and source; a system
// denial and the digests are carried; an empty policy still has a (non-nil) host list.
func TestRender(t *testing.T) {
	std := netpolicy.Standard
	deny, err := netpolicy.ParsePattern("bitbucket.org")
	if err != nil {
		t.Fatal(err)
	}
	eff, err := netpolicy.Resolve(netpolicy.Inputs{
		System: &netpolicy.SystemPolicy{Deny: []netpolicy.Pattern{deny}},
		Flags:  netpolicy.LayerConfig{Profile: &std},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := Render(eff, "sha256:abc")
	if p.Profile != "standard" || p.Digest != eff.Digest() || p.SystemDigest != "sha256:abc" {
		t.Fatalf("profile %q digest %q system %q", p.Profile, p.Digest, p.SystemDigest)
	}
	if len(p.Hosts) != len(eff.Hosts) {
		t.Fatalf("%d hosts rendered, policy has %d", len(p.Hosts), len(eff.Hosts))
	}
	byName := map[string][]string{}
	for _, h := range p.Hosts {
		byName[h.Name] = h.Ports
		if h.Layer == "" || h.Source == "" {
			t.Errorf("host %s without layer or source: %+v", h.Name, h)
		}
	}
	if got := byName["github.com"]; len(got) != 2 || got[0] != "22/tcp" && got[1] != "22/tcp" {
		t.Errorf("github.com ports %v, want 443/tcp and 22/tcp", got)
	}
	if len(p.Denied) != 1 || p.Denied[0].Pattern != "bitbucket.org" {
		t.Errorf("denied %+v, want bitbucket.org", p.Denied)
	}
	if empty := Render(&netpolicy.Effective{}, ""); empty.Hosts == nil || len(empty.Hosts) != 0 {
		t.Errorf("zero policy hosts %#v, want an empty list", empty.Hosts)
	}
}
