package sshagent

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"

	"brood.dev/brood/internal/testenv"
)

// fakeCodeHost is an SSH server on loopback (golang.org/x/crypto/ssh) that accepts the
// public key auth of key and runs every exec as a success; authed records the keys it
// accepted.
type fakeCodeHost struct {
	addr   string
	mu     sync.Mutex
	authed []string
}

func startCodeHost(t *testing.T, hostKey ssh.Signer, key ssh.PublicKey) *fakeCodeHost {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	h := &fakeCodeHost{addr: l.Addr().String()}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if string(k.Marshal()) != string(key.Marshal()) {
			return nil, fmt.Errorf("unknown key")
		}
		// Called for a key the client only offers too: the login counts once the
		// handshake (the signature's check included) succeeded.
		return &ssh.Permissions{Extensions: map[string]string{"key": ssh.FingerprintSHA256(k)}}, nil
	}}
	cfg.AddHostKey(hostKey)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go h.serve(c, cfg)
		}
	}()
	return h
}

// serve answers one connection: it records the key that logged in, and every session's
// exec exits 0.
func (h *fakeCodeHost) serve(c net.Conn, cfg *ssh.ServerConfig) {
	defer c.Close()
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	h.mu.Lock()
	h.authed = append(h.authed, sc.Permissions.Extensions["key"])
	h.mu.Unlock()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go func() {
			for r := range creqs {
				r.Reply(r.Type == "exec", nil)
				if r.Type == "exec" {
					ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{0}))
					ch.Close()
				}
			}
		}()
	}
}

// logins returns the fingerprints of the keys that logged in.
func (h *fakeCodeHost) logins() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.authed...)
}

// serveFilter serves p on a unix socket in dir and returns its path.
func serveFilter(t *testing.T, dir string, p *Policy) string {
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Serve(t, l, func(c net.Conn) { p.Serve(c) })
	return sock
}

// TestOpenSSHThroughFilter: a real OpenSSH client (session-bind needs OpenSSH >= 8.9)
// with SSH_AUTH_SOCK on the filter logs in to a fake code host whose host key is the
// allowed code host's in the test's known_hosts (HostKeys reads it), with the listed key;
// a second fake host, known to ssh (the same known_hosts) but not an allowed code host,
// gets no signature: ssh fails to log in and the refusal is logged.
func TestOpenSSHThroughFilter(t *testing.T) {
	sshBin := testenv.RequireCommand(t, "ssh")
	b := newBed(t)
	allowed := startCodeHost(t, b.host, b.listed.PublicKey())
	other := startCodeHost(t, b.other, b.listed.PublicKey())
	dir := t.TempDir()
	kh := filepath.Join(dir, "known_hosts")
	var lines []string
	for _, x := range []struct {
		addr string
		key  ssh.PublicKey
	}{{allowed.addr, b.host.PublicKey()}, {other.addr, b.other.PublicKey()}} {
		lines = append(lines, knownHostsLine(x.addr, x.key))
	}
	if err := os.WriteFile(kh, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	hk, err := HostKeys([]string{kh, filepath.Join(dir, "absent")}, []string{allowed.addr})
	if err != nil || len(hk[allowed.addr]) != 1 {
		t.Fatalf("HostKeys = %v, %v", hk, err)
	}
	b.pol.HostKeys = hk
	sock := serveFilter(t, dir, b.pol)

	login := func(addr string) ([]byte, error) {
		host, port, _ := net.SplitHostPort(addr)
		cmd := exec.Command(sshBin, "-F", "/dev/null", "-o", "UserKnownHostsFile="+kh, "-o", "GlobalKnownHostsFile=/dev/null",
			"-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "PasswordAuthentication=no",
			"-o", "KbdInteractiveAuthentication=no", "-p", port, "git@"+host, "true")
		cmd.Env = []string{"HOME=" + dir, "SSH_AUTH_SOCK=" + sock, "PATH=" + os.Getenv("PATH")}
		return cmd.CombinedOutput()
	}
	if out, err := login(allowed.addr); err != nil {
		t.Fatalf("ssh to the allowed code host: %v\n%s", err, out)
	}
	if a := allowed.logins(); len(a) != 1 || a[0] != ssh.FingerprintSHA256(b.listed.PublicKey()) {
		t.Errorf("the allowed host accepted %v", a)
	}
	if out, err := login(other.addr); err == nil {
		t.Errorf("ssh to a host that is no allowed code host logged in:\n%s", out)
	}
	if a := other.logins(); len(a) != 0 {
		t.Errorf("the other host accepted %v", a)
	}
	ev, _ := b.log.Events()
	var signed, refused int
	for _, e := range ev {
		switch {
		case e.Op == "sign" && !e.Refused && e.Host == allowed.addr:
			signed++
		case e.Op == "sign" && e.Refused && strings.Contains(e.Reason, "no allowed code host"):
			refused++
		}
	}
	if signed != 1 || refused == 0 {
		t.Errorf("log: %d signatures for the allowed host (want 1), %d refused for the other (want > 0): %+v", signed, refused, ev)
	}
}

// knownHostsLine is the known_hosts line of key for addr (host:port).
func knownHostsLine(addr string, key ssh.PublicKey) string {
	return "[" + strings.Replace(addr, ":", "]:", 1) + " " + string(ssh.MarshalAuthorizedKey(key))
}
