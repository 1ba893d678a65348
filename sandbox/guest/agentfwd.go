package guest

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"
)

// Agent forwarding (OpenSSH PROTOCOL §2.1): a session that asked for it with
// auth-agent-req@openssh.com before its command gets SSH_AUTH_SOCK, a unix socket in a
// directory only the agent user can enter; each connection to it is carried to the client
// (brood, which serves its filtered agent there) in an auth-agent@openssh.com channel.
const (
	agentRequest = "auth-agent-req@openssh.com"
	agentChannel = "auth-agent@openssh.com"
)

// agentRunDir is where the sessions' agent socket directories are made (the guest's /run,
// a tmpfs); g.agentDir replaces it in tests.
const agentRunDir = "/run"

// agentSocket listens on a new socket for session s (a 0700 directory and a 0600 socket,
// both the agent user's) and forwards each connection to it over s's SSH connection
// until done is closed; then it removes both. It returns the socket's path.
func (g *guest) agentSocket(s *session, done <-chan struct{}) (string, error) {
	parent := agentRunDir
	if g.agentDir != "" {
		parent = g.agentDir
	}
	dir, err := os.MkdirTemp(parent, "brood-agent.")
	if err != nil {
		return "", fmt.Errorf("agent forwarding: %w", err)
	}
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err == nil {
		err = chownAll(g.cfg.UID, g.cfg.GID, dir, sock)
	}
	if err == nil {
		err = os.Chmod(sock, 0o600)
	}
	if err != nil {
		if l != nil {
			l.Close()
		}
		os.RemoveAll(dir)
		return "", fmt.Errorf("agent forwarding: %w", err)
	}
	go func() {
		<-done
		l.Close()
		os.RemoveAll(dir)
	}()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go forwardAgent(s.conn, c)
		}
	}()
	return sock, nil
}

func chownAll(uid, gid int, paths ...string) error {
	for _, p := range paths {
		if err := os.Chown(p, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// forwardAgent carries the agent connection c in a new auth-agent@openssh.com channel of
// conn, both ways, until either side ends.
func forwardAgent(conn ssh.Conn, c net.Conn) {
	defer c.Close()
	ch, reqs, err := conn.OpenChannel(agentChannel, nil)
	if err != nil {
		return
	}
	defer ch.Close()
	go ssh.DiscardRequests(reqs)
	go func() {
		io.Copy(ch, c)
		ch.CloseWrite()
	}()
	io.Copy(c, ch)
}
