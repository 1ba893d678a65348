package guestcfg

import (
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

func TestConfigRoundTrip(t *testing.T) {
	k, err := NewKeys()
	if err != nil {
		t.Fatal(err)
	}
	c := k.Config()
	c.Net = &Net{Address: netip.MustParsePrefix("10.0.0.2/30"), Gateway: netip.MustParseAddr("10.0.0.1"),
		DNS:      []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")},
		Address6: netip.MustParsePrefix("fd00::2/126"), Gateway6: netip.MustParseAddr("fd00::1")}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.User != DefaultUser || got.UID != DefaultUID || got.GID != DefaultGID || got.Net.Address != c.Net.Address ||
		got.Net.Address6 != c.Net.Address6 || got.Net.Gateway6 != c.Net.Gateway6 || len(got.Net.DNS) != 2 {
		t.Errorf("round trip = %+v", got)
	}
	signer, err := ssh.ParsePrivateKey(got.HostKey)
	if err != nil || string(signer.PublicKey().Marshal()) != string(k.HostSigner.PublicKey().Marshal()) {
		t.Errorf("host key does not round-trip to the pinned public key (err %v)", err)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(got.AuthorizedKey))
	if err != nil || string(pub.Marshal()) != string(k.ClientSigner.PublicKey().Marshal()) {
		t.Errorf("authorized key is not the client key (err %v)", err)
	}
}

func TestUnmarshalRejects(t *testing.T) {
	for name, in := range map[string]string{
		"unknown field":      `{"host_key":"eA==","authorized_key":"k","shell":"/bin/bash"}`,
		"no keys":            `{}`,
		"negative uid":       `{"host_key":"eA==","authorized_key":"k","uid":-1}`,
		"net sans gw":        `{"host_key":"eA==","authorized_key":"k","net":{"address":"10.0.0.2/30"}}`,
		"not json":           `host_key=x`,
		"v6 sans gw":         `{"host_key":"eA==","authorized_key":"k","net":{"address":"10.0.0.2/30","gateway":"10.0.0.1","address6":"fd00::2/126"}}`,
		"v6 gw sans address": `{"host_key":"eA==","authorized_key":"k","net":{"address":"10.0.0.2/30","gateway":"10.0.0.1","gateway6":"fd00::1"}}`,
		"v4 as v6":           `{"host_key":"eA==","authorized_key":"k","net":{"address":"10.0.0.2/30","gateway":"10.0.0.1","address6":"10.0.0.6/30","gateway6":"10.0.0.5"}}`,
	} {
		if _, err := Unmarshal([]byte(in)); err == nil {
			t.Errorf("%s: Unmarshal accepted %s", name, in)
		} else if !strings.Contains(err.Error(), "guest config") {
			t.Errorf("%s: error %q does not name the guest config", name, err)
		}
	}
}

func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(`{"host_key":"eA==","authorized_key":"k","uid":5}`))
	f.Add([]byte(`{"net":{"address":"10.0.0.2/30","gateway":"10.0.0.1"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Unmarshal(b)
		if err != nil {
			return
		}
		if c.UID <= 0 || c.GID <= 0 || c.User == "" || len(c.HostKey) == 0 || c.AuthorizedKey == "" {
			t.Errorf("Unmarshal accepted an unsafe config: %+v", c)
		}
	})
}
