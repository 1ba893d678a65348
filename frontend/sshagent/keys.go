package sshagent

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Resolve returns the keys of the developer's agent (keys, its List) that specs name, in
// order and without duplicates. A spec is a fingerprint ("SHA256:..."), the path of a
// public key file (authorized_keys format, e.g. ~/.ssh/id_ed25519.pub) or a key comment;
// each must name at least one key of the agent, else the error names it.
func Resolve(specs []string, keys []*agent.Key) ([]ssh.PublicKey, error) {
	var out []ssh.PublicKey
	add := func(k ssh.PublicKey) {
		for _, o := range out {
			if string(o.Marshal()) == string(k.Marshal()) {
				return
			}
		}
		out = append(out, k)
	}
	for _, spec := range specs {
		match, err := matcher(spec)
		if err != nil {
			return nil, err
		}
		n := 0
		for _, k := range keys {
			if match(k) {
				add(k)
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("--ssh-agent %q: no key of your SSH agent matches (ssh-add -l lists them)", spec)
		}
	}
	return out, nil
}

// matcher returns the test of spec against an agent key.
func matcher(spec string) (func(*agent.Key) bool, error) {
	if strings.HasPrefix(spec, "SHA256:") {
		return func(k *agent.Key) bool { return ssh.FingerprintSHA256(k) == spec }, nil
	}
	if b, err := os.ReadFile(spec); err == nil {
		pk, _, _, _, err := ssh.ParseAuthorizedKey(b)
		if err != nil {
			return nil, fmt.Errorf("--ssh-agent %s: not a public key file: %w", spec, err)
		}
		want := string(pk.Marshal())
		return func(k *agent.Key) bool { return string(k.Marshal()) == want }, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("--ssh-agent %s: %w", spec, err)
	}
	return func(k *agent.Key) bool { return k.Comment == spec }, nil
}

// HostKeys returns the host keys known_hosts files give for each of hosts (names; port 22),
// leaving out hosts none of them knows. It asks golang.org/x/crypto/ssh/knownhosts with a
// throw-away key: the mismatch it reports lists every key the files accept for the host
// (KeyError.Want), hashed host names, patterns and @revoked lines included.
func HostKeys(files []string, hosts []string) (map[string][]ssh.PublicKey, error) {
	var existing []string
	for _, f := range files {
		if _, err := os.Stat(f); err == nil {
			existing = append(existing, f)
		}
	}
	out := map[string][]ssh.PublicKey{}
	if len(existing) == 0 {
		return out, nil
	}
	check, err := knownhosts.New(existing...)
	if err != nil {
		return nil, fmt.Errorf("read known_hosts: %w", err)
	}
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	probe, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, err
	}
	for _, h := range hosts {
		addr := h // the callback takes "host:port", as ssh.Dial passes it
		if _, _, err := net.SplitHostPort(h); err != nil {
			addr = net.JoinHostPort(h, "22")
		}
		err := check(addr, &net.TCPAddr{IP: net.IPv6unspecified, Port: 22}, probe)
		var ke *knownhosts.KeyError
		if errors.As(err, &ke) {
			for _, w := range ke.Want {
				out[h] = append(out[h], w.Key)
			}
		}
	}
	return out, nil
}
