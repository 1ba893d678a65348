package cli

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/sshagent"
	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/testenv"
)

// devAgent serves an in-memory keyring holding keys (comment → key) on a unix socket,
// sets SSH_AUTH_SOCK to it and returns it.
func devAgent(t *testing.T, keys map[string]ed25519.PrivateKey) string {
	ring := agent.NewKeyring()
	for c, k := range keys {
		ring.Add(agent.AddedKey{PrivateKey: k, Comment: c})
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Serve(t, l, func(c net.Conn) { agent.ServeAgent(ring, c) })
	t.Setenv("SSH_AUTH_SOCK", sock)
	return sock
}

// TestRunSSHAgent: `brood run --ssh-agent dev-key` forwards the filtered agent over the
// guest's SSH connection: the guest's agent lists dev-key only, an unbound signature is
// refused, a signature for a session bound to github.com's key from known_hosts (a code
// host the session allows on port 22) is made; the run prints both, vm.json lists them,
// and the helper was told (StartVMArgs.SSHAgent).
func TestRunSSHAgent(t *testing.T) {
	f := newFakeHelper(t)
	dev, devKey := testenv.SSHSigner(t)
	_, otherKey := testenv.SSHSigner(t)
	host, _ := testenv.SSHSigner(t)
	devAgent(t, map[string]ed25519.PrivateKey{"dev-key": devKey, "other-key": otherKey})
	home := t.TempDir()
	t.Setenv("HOME", home)
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(home, ".ssh", "known_hosts"), []byte("github.com "+string(ssh.MarshalAuthorizedKey(host.PublicKey()))), 0o600)
	f.VMEgress = &api.EgressInfo{Profile: "locked", Hosts: []string{"*.github.com (443/tcp)", "github.com (22/tcp, 443/tcp)", "pypi.org (443/tcp)"}}
	f.AgentUse = func(a agent.ExtendedAgent) string {
		keys, err := a.List()
		if err != nil || len(keys) == 0 {
			return fmt.Sprintf("list: %d, %v\n", len(keys), err)
		}
		sid := []byte(strings.Repeat("s", 32))
		data := ssh.Marshal(struct {
			SID                   []byte
			Type                  byte
			User, Service, Method string
			HasSig                bool
			Algo                  string
			Key                   []byte
		}{sid, 50, "git", "ssh-connection", "publickey", true, keys[0].Type(), keys[0].Marshal()})
		_, unbound := a.Sign(keys[0], data)
		sig, _ := host.Sign(rand.Reader, sid)
		a.Extension(sshagent.SessionBind, ssh.Marshal(struct {
			HostKey, SID, Sig []byte
			Fwd               bool
		}{host.PublicKey().Marshal(), sid, ssh.Marshal(sig), false}))
		_, bound := a.Sign(keys[0], data)
		return fmt.Sprintf("listed %d (%s); unbound err %v; bound err %v\n", len(keys), ssh.FingerprintSHA256(keys[0]), unbound != nil, bound)
	}
	code, stdout, stderr, ss := fakeRun(t, "run", "--egress", "locked", "--ssh-agent", "dev-key", "shell", "--", "true")
	if code != 0 || len(ss) != 1 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	want := fmt.Sprintf("listed 1 (%s); unbound err true; bound err <nil>", ssh.FingerprintSHA256(dev.PublicKey()))
	if !strings.Contains(stdout, want) {
		t.Errorf("guest output lacks %q:\n%s", want, stdout)
	}
	for _, w := range []string{"signs only SSH logins bound to github.com (1 host key(s))",
		"ssh-agent: 1 signature(s) (1 for github.com), 1 request(s) refused", "ssh-agent refused sign"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
	if !f.StartArgs().SSHAgent {
		t.Error("StartVMArgs.SSHAgent not set")
	}
	b, _ := os.ReadFile(filepath.Join(ss[0].Dir, frontend.VMRecordFile))
	var rec frontend.VMRecord
	if err := json.Unmarshal(b, &rec); err != nil || len(rec.SSHAgent) != 3 || !rec.SSHAgent[0].Refused {
		t.Errorf("vm.json ssh_agent = %+v (%v)", rec.SSHAgent, err)
	}
}

// TestRunSSHAgentUsage: --ssh-agent without a network, without an agent, or naming no
// key of the agent is a usage error before anything starts.
func TestRunSSHAgentUsage(t *testing.T) {
	newFakeHelper(t)
	_, k := testenv.SSHSigner(t)
	sock := devAgent(t, map[string]ed25519.PrivateKey{"dev-key": k})
	for _, c := range []struct {
		sock string
		args []string
		want string
	}{
		{sock, []string{"run", "--ssh-agent", "dev-key", "shell", "--", "true"}, "needs a network"},
		{"", []string{"run", "--egress", "locked", "--ssh-agent", "dev-key", "shell", "--", "true"}, "SSH_AUTH_SOCK is not set"},
		{sock, []string{"run", "--egress", "locked", "--ssh-agent", "SHA256:nope", "shell", "--", "true"}, "no key of your SSH agent matches"},
	} {
		t.Setenv("SSH_AUTH_SOCK", c.sock)
		code, _, stderr, ss := fakeRun(t, c.args...)
		if code != ExitUsage || !strings.Contains(stderr, c.want) || len(ss) != 0 {
			t.Errorf("%v: exit %d, %d sessions\n%s", c.args, code, len(ss), stderr)
		}
	}
}

// TestRunSSHAgentNoKnownHost: with no allowed code host key in known_hosts the run stops
// after the boot, before the agent's command starts.
func TestRunSSHAgentNoKnownHost(t *testing.T) {
	f := newFakeHelper(t)
	_, k := testenv.SSHSigner(t)
	devAgent(t, map[string]ed25519.PrivateKey{"dev-key": k})
	t.Setenv("HOME", t.TempDir())
	f.VMEgress = &api.EgressInfo{Profile: "locked", Hosts: []string{"github.com (22/tcp, 443/tcp)"}}
	code, stdout, stderr, _ := fakeRun(t, "run", "--egress", "locked", "--ssh-agent", "dev-key", "shell", "--", "true")
	if code == 0 || !strings.Contains(stderr, "has a key in") || strings.Contains(stdout, "ran: ") {
		t.Errorf("exit %d\n%s\n%s", code, stdout, stderr)
	}
}
