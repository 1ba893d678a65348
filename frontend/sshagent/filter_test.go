package sshagent

import (
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// bed is a filter in front of an in-memory keyring holding a listed key and an unlisted
// one, with one allowed code host.
type bed struct {
	listed, unlisted ssh.Signer
	host, other      ssh.Signer // the allowed code host's host key, and another host's
	log              *Log
	pol              *Policy
}

func newBed(t *testing.T) *bed {
	b := &bed{log: &Log{}}
	var lp, up ed25519.PrivateKey
	b.listed, lp = testenv.SSHSigner(t)
	b.unlisted, up = testenv.SSHSigner(t)
	b.host, _ = testenv.SSHSigner(t)
	b.other, _ = testenv.SSHSigner(t)
	ring := agent.NewKeyring()
	for _, k := range []ed25519.PrivateKey{lp, up} {
		if err := ring.Add(agent.AddedKey{PrivateKey: k, Comment: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	b.pol = &Policy{Keys: []ssh.PublicKey{b.listed.PublicKey()},
		HostKeys: map[string][]ssh.PublicKey{"github.com": {b.host.PublicKey()}}, Log: b.log,
		Upstream: func() (agent.ExtendedAgent, io.Closer, error) {
			return ring.(agent.ExtendedAgent), io.NopCloser(nil), nil
		}}
	return b
}

// client returns an agent client whose connection the filter serves (over a net.Pipe,
// the wire protocol of golang.org/x/crypto/ssh/agent).
func (b *bed) client(t *testing.T) agent.ExtendedAgent {
	c, s := net.Pipe()
	go b.pol.Serve(s)
	t.Cleanup(func() { c.Close() })
	return agent.NewClient(c)
}

// bindMsg is a session-bind of session sid signed by host (signer: who signs).
func bindMsg(t *testing.T, host, signer ssh.Signer, sid []byte, fwd bool) []byte {
	sig, err := signer.Sign(rand.Reader, sid)
	if err != nil {
		t.Fatal(err)
	}
	return ssh.Marshal(sessionBindMsg{HostKey: host.PublicKey().Marshal(), SessionID: sid, Signature: ssh.Marshal(sig), Forwarding: fwd})
}

// userAuth is the signed data of a public-key authentication of session sid with key.
func userAuth(sid []byte, key ssh.PublicKey) []byte {
	return ssh.Marshal(userAuthMsg{SessionID: sid, Type: msgUserAuthRequest, User: "git", Service: "ssh-connection",
		Method: methodPublicKey, HasSig: true, Algo: key.Type(), PubKey: key.Marshal()})
}

func sid(n byte) []byte { return []byte(strings.Repeat(string(rune('a'+n)), 32)) }

// TestFilterSignsBoundToAllowedHost: bound to the allowed code host's key, a user
// authentication of that session with the listed key is signed, and the signature
// verifies; List shows the listed key only.
func TestFilterSignsBoundToAllowedHost(t *testing.T) {
	b := newBed(t)
	c := b.client(t)
	keys, err := c.List()
	if err != nil || len(keys) != 1 || string(keys[0].Marshal()) != string(b.listed.PublicKey().Marshal()) {
		t.Fatalf("List = %v, %v; want the listed key only", keys, err)
	}
	if _, err := c.Extension(SessionBind, bindMsg(t, b.host, b.host, sid(0), false)); err != nil {
		t.Fatalf("session-bind: %v", err)
	}
	data := userAuth(sid(0), b.listed.PublicKey())
	sig, err := c.Sign(b.listed.PublicKey(), data)
	if err != nil {
		t.Fatalf("sign bound to the allowed host: %v", err)
	}
	if err := b.listed.PublicKey().Verify(data, sig); err != nil {
		t.Errorf("signature does not verify: %v", err)
	}
	ev, _ := b.log.Events()
	if len(ev) != 2 || ev[1].Op != "sign" || ev[1].Refused || ev[1].Host != "github.com" {
		t.Errorf("log %+v", ev)
	}
}

// TestFilterRefuses: every request but a bound, listed, matching signature is refused,
// and each refusal is logged.
func TestFilterRefuses(t *testing.T) {
	b := newBed(t)
	listed := b.listed.PublicKey()
	cases := []struct {
		name string
		do   func(c agent.ExtendedAgent) error
	}{
		{"no session-bind", func(c agent.ExtendedAgent) error { _, err := c.Sign(listed, userAuth(sid(0), listed)); return err }},
		{"unlisted host key", func(c agent.ExtendedAgent) error {
			if _, err := c.Extension(SessionBind, bindMsg(t, b.other, b.other, sid(1), false)); err != nil {
				return nil // a bind is accepted; the sign below must fail
			}
			_, err := c.Sign(listed, userAuth(sid(1), listed))
			return err
		}},
		{"key not listed", func(c agent.ExtendedAgent) error {
			c.Extension(SessionBind, bindMsg(t, b.host, b.host, sid(2), false))
			_, err := c.Sign(b.unlisted.PublicKey(), userAuth(sid(2), b.unlisted.PublicKey()))
			return err
		}},
		{"another session", func(c agent.ExtendedAgent) error {
			c.Extension(SessionBind, bindMsg(t, b.host, b.host, sid(3), false))
			_, err := c.Sign(listed, userAuth(sid(4), listed))
			return err
		}},
		{"arbitrary data", func(c agent.ExtendedAgent) error {
			c.Extension(SessionBind, bindMsg(t, b.host, b.host, sid(5), false))
			_, err := c.Sign(listed, []byte("commit or challenge"))
			return err
		}},
		{"forged bind", func(c agent.ExtendedAgent) error {
			_, err := c.Extension(SessionBind, bindMsg(t, b.host, b.other, sid(6), false))
			return err
		}},
		{"forwarding bind", func(c agent.ExtendedAgent) error {
			_, err := c.Extension(SessionBind, bindMsg(t, b.host, b.host, sid(7), true))
			return err
		}},
		{"second bind", func(c agent.ExtendedAgent) error {
			c.Extension(SessionBind, bindMsg(t, b.other, b.other, sid(8), false))
			_, err := c.Extension(SessionBind, bindMsg(t, b.host, b.host, sid(9), false))
			return err
		}},
		{"add", func(c agent.ExtendedAgent) error {
			_, k := testenv.SSHSigner(t)
			return c.Add(agent.AddedKey{PrivateKey: k})
		}},
		{"remove", func(c agent.ExtendedAgent) error { return c.Remove(listed) }},
		{"remove all", func(c agent.ExtendedAgent) error { return c.RemoveAll() }},
		{"lock", func(c agent.ExtendedAgent) error { return c.Lock([]byte("pw")) }},
		{"other extension", func(c agent.ExtendedAgent) error {
			_, err := c.Extension("query", nil)
			return err
		}},
	}
	for _, tc := range cases {
		before, _ := b.log.Events()
		if err := tc.do(b.client(t)); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
		after, _ := b.log.Events()
		if len(after) == len(before) || !after[len(after)-1].Refused {
			t.Errorf("%s: no refusal logged (%+v)", tc.name, after[len(before):])
		}
	}
	if keys, _ := b.client(t).List(); len(keys) != 1 {
		t.Errorf("after the refusals the agent lists %d keys, want 1 (nothing added or removed)", len(keys))
	}
}

// TestHostKeys: the keys known_hosts gives a code host name (port 22), plain or hashed
// (HashKnownHosts), every one of them; a host it does not know is left out, a missing
// file is no error.
func TestHostKeys(t *testing.T) {
	a, _ := testenv.SSHSigner(t)
	b, _ := testenv.SSHSigner(t)
	c, _ := testenv.SSHSigner(t)
	kh := filepath.Join(t.TempDir(), "known_hosts")
	line := func(host string, k ssh.Signer) string {
		return knownhosts.Line([]string{host}, k.PublicKey()) + "\n"
	}
	os.WriteFile(kh, []byte(line("github.com", a)+line(knownhosts.HashHostname("github.com"), b)+line("gitlab.com", c)), 0o600)
	got, err := HostKeys([]string{kh, kh + ".absent"}, []string{"github.com", "codeberg.org"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got["github.com"]) != 2 {
		t.Fatalf("HostKeys = %v; want github.com's two keys only", got)
	}
}

// TestResolve: a KEY is a fingerprint, a public key file or a comment of the agent's keys;
// one that names no key is an error.
func TestResolve(t *testing.T) {
	a, _ := testenv.SSHSigner(t)
	b, _ := testenv.SSHSigner(t)
	keys := []*agent.Key{{Format: a.PublicKey().Type(), Blob: a.PublicKey().Marshal(), Comment: "work"},
		{Format: b.PublicKey().Type(), Blob: b.PublicKey().Marshal(), Comment: "home"}}
	pub := filepath.Join(t.TempDir(), "id.pub")
	os.WriteFile(pub, ssh.MarshalAuthorizedKey(b.PublicKey()), 0o644)
	for _, c := range []struct {
		specs []string
		want  []ssh.PublicKey
	}{
		{[]string{ssh.FingerprintSHA256(a.PublicKey())}, []ssh.PublicKey{a.PublicKey()}},
		{[]string{pub}, []ssh.PublicKey{b.PublicKey()}},
		{[]string{"home", "work", "home"}, []ssh.PublicKey{b.PublicKey(), a.PublicKey()}},
	} {
		got, err := Resolve(c.specs, keys)
		if err != nil || len(got) != len(c.want) {
			t.Fatalf("Resolve(%v) = %v, %v", c.specs, got, err)
		}
		for i := range got {
			if string(got[i].Marshal()) != string(c.want[i].Marshal()) {
				t.Errorf("Resolve(%v)[%d] is another key", c.specs, i)
			}
		}
	}
	if _, err := Resolve([]string{"nobody"}, keys); err == nil {
		t.Error("a KEY naming no key resolved")
	}
}

// TestLogBounded: the log keeps maxEvents events and counts the rest.
func TestLogBounded(t *testing.T) {
	b := newBed(t)
	c := b.client(t)
	for range maxEvents + 3 {
		c.RemoveAll()
	}
	ev, dropped := b.log.Events()
	if len(ev) != maxEvents || dropped != 3 {
		t.Errorf("%d events kept, %d dropped; want %d and 3", len(ev), dropped, maxEvents)
	}
}

// TestAdmit: MaxConns connections are admitted at once; the next is refused and logged
// until one is done (done twice frees one slot only).
func TestAdmit(t *testing.T) {
	b := newBed(t)
	var dones []func()
	for range MaxConns {
		d, ok := b.pol.Admit()
		if !ok {
			t.Fatalf("refused before %d connections", MaxConns)
		}
		dones = append(dones, d)
	}
	if _, ok := b.pol.Admit(); ok {
		t.Fatalf("connection %d admitted", MaxConns+1)
	}
	if ev, _ := b.log.Events(); len(ev) != 1 || ev[0].Op != "connect" || !ev[0].Refused {
		t.Errorf("log %+v", ev)
	}
	dones[0]()
	dones[0]()
	if _, ok := b.pol.Admit(); !ok {
		t.Fatal("not admitted after one was done")
	}
	if _, ok := b.pol.Admit(); ok {
		t.Fatal("a second done freed a second slot")
	}
}
