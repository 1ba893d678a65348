package guest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox/guestcfg"
)

// TestSession runs commands through session over an in-memory SSH connection: exit
// status, stdout and stderr kept apart, env requests (a bad name refused), a PTY with
// the requested size and TERM, and a command killed by a signal (128+N). It runs in a
// child process: the reaper waits for any child of the process it runs in.
func TestSession(t *testing.T) {
	if os.Getenv("BROOD_TEST_SESSION") == "1" {
		if err := sessionChild(); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testenv.RequireRoot(t) // the command runs with a credential (setgroups)
	cmd := exec.Command(os.Args[0], "-test.run=^TestSession$")
	cmd.Env = append(os.Environ(), "BROOD_TEST_SESSION=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// sessionChild is TestSession's body in the re-executed child; it returns the first
// mismatch.
func sessionChild() error {
	client, err := sessionClient()
	if err != nil {
		return err
	}
	defer client.Close()

	s, err := client.NewSession()
	if err != nil {
		return err
	}
	if err := s.Setenv("A=B", "x"); err == nil {
		return errors.New(`env "A=B" accepted`)
	}
	if err := s.Setenv("FOO", "bar"); err != nil {
		return fmt.Errorf("env FOO: %w", err)
	}
	var out, errOut bytes.Buffer
	s.Stdout, s.Stderr = &out, &errOut
	err = s.Run("echo $FOO; echo e >&2; exit 3")
	var exit *ssh.ExitError
	if !errors.As(err, &exit) || exit.ExitStatus() != 3 {
		return fmt.Errorf("exit 3: Run = %v", err)
	}
	if out.String() != "bar\n" || errOut.String() != "e\n" {
		return fmt.Errorf("stdout %q, stderr %q; want \"bar\\n\", \"e\\n\"", out.String(), errOut.String())
	}

	s, err = client.NewSession()
	if err != nil {
		return err
	}
	if err := s.RequestPty("xterm-test", 40, 100, nil); err != nil {
		return fmt.Errorf("pty-req: %w", err)
	}
	// The command waits for a line on stdin until its two lines were read here, so none
	// of its output depends on how fast the PTY drains after it exits.
	got, err := ptyLines(s, "stty size; echo $TERM; read x", 2)
	if err != nil {
		return fmt.Errorf("pty: %w", err)
	}
	if got := strings.ReplaceAll(got, "\r\n", "\n"); got != "40 100\nxterm-test\n" {
		return fmt.Errorf("pty output %q, want \"40 100\\nxterm-test\\n\"", got)
	}

	s, err = client.NewSession()
	if err != nil {
		return err
	}
	err = s.Run("kill -TERM $$")
	if !errors.As(err, &exit) || exit.ExitStatus() != 128+15 {
		return fmt.Errorf("killed by TERM: Run = %v, want exit status 143", err)
	}
	return agentForwarding(client)
}

// agentForwarding: a session that asked for agent forwarding gets SSH_AUTH_SOCK, a 0600
// socket in a 0700 directory, whose connections reach the client's agent (an in-memory
// keyring served with agent.ForwardToAgent): ssh-add lists its key; without the request
// the command has no SSH_AUTH_SOCK.
func agentForwarding(client *ssh.Client) error {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	ring := agent.NewKeyring()
	if err := ring.Add(agent.AddedKey{PrivateKey: key, Comment: "forwarded-key"}); err != nil {
		return err
	}
	if err := agent.ForwardToAgent(client, ring); err != nil {
		return err
	}
	s, err := client.NewSession()
	if err != nil {
		return err
	}
	if err := agent.RequestAgentForwarding(s); err != nil {
		return fmt.Errorf("auth-agent-req: %w", err)
	}
	script := `stat -c %a "$SSH_AUTH_SOCK" "$(dirname "$SSH_AUTH_SOCK")"; ssh-add -l`
	out, err := s.CombinedOutput(script)
	if err != nil || !strings.Contains(string(out), "600\n700\n") || !strings.Contains(string(out), "forwarded-key") {
		return fmt.Errorf("forwarded agent: %v\n%s", err, out)
	}
	if s, err = client.NewSession(); err != nil {
		return err
	}
	if out, err := s.CombinedOutput(`echo "[$SSH_AUTH_SOCK]"`); err != nil || string(out) != "[]\n" {
		return fmt.Errorf("without the request: %q, %v; want no SSH_AUTH_SOCK", out, err)
	}
	return nil
}

// ptyLines starts cmd in s, reads n lines of its output, then sends it one line on stdin
// and waits for it to exit 0. It returns the lines read (with the PTY's \r\n endings).
func ptyLines(s *ssh.Session, cmd string, n int) (string, error) {
	stdin, err := s.StdinPipe()
	if err != nil {
		return "", err
	}
	stdout, err := s.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := s.Start(cmd); err != nil {
		return "", err
	}
	var got []byte
	buf := make([]byte, 256)
	for bytes.Count(got, []byte("\n")) < n {
		k, err := stdout.Read(buf)
		got = append(got, buf[:k]...)
		if err != nil {
			return string(got), fmt.Errorf("read output: %w", err)
		}
	}
	if _, err := stdin.Write([]byte("\n")); err != nil {
		return string(got), err
	}
	return string(got), s.Wait()
}

// sessionClient connects an SSH client to a server whose session channels g.session
// serves, over a socket pair, with a guest running commands as root.
func sessionClient() (*ssh.Client, error) {
	g := &guest{cfg: guestcfg.Config{User: "root"}, ready: make(chan struct{}), reaper: newReaper(), agentDir: os.TempDir()}
	close(g.ready)
	return sessionClientFor(g)
}

// sessionClientFor connects an SSH client to a server whose session channels g.session
// serves, over a socket pair.
func sessionClientFor(g *guest) (*ssh.Client, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		return nil, err
	}
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(signer)
	sc, cc, err := socketPair()
	if err != nil {
		return nil, err
	}
	go func() {
		conn, chans, reqs, err := ssh.NewServerConn(sc, cfg)
		if err != nil {
			return
		}
		go ssh.DiscardRequests(reqs)
		for nc := range chans {
			ch, creqs, err := nc.Accept()
			if err == nil {
				go g.session(conn, ch, creqs)
			}
		}
	}()
	conn, chans, reqs, err := ssh.NewClientConn(cc, "pipe", &ssh.ClientConfig{
		User: "root", HostKeyCallback: ssh.FixedHostKey(signer.PublicKey()),
	})
	if err != nil {
		return nil, fmt.Errorf("ssh handshake: %w", err)
	}
	return ssh.NewClient(conn, chans, reqs), nil
}

// socketPair returns the two ends of a connected AF_UNIX stream socket pair (net.Pipe
// would deadlock: both SSH ends write their version line before reading).
func socketPair() (net.Conn, net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return nil, nil, err
		}
		conns[i] = c
	}
	return conns[0], conns[1], nil
}
