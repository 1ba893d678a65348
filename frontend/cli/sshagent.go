package cli

import (
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh/agent"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/sshagent"
	"brood.dev/brood/helper/api"
)

// knownHostsFiles are the known_hosts files whose keys bind the forwarded agent's
// signatures: the developer's and the system's (ssh_config(5) UserKnownHostsFile and
// GlobalKnownHostsFile defaults).
func knownHostsFiles() []string {
	files := []string{"/etc/ssh/ssh_known_hosts"}
	if home, err := os.UserHomeDir(); err == nil {
		files = append([]string{filepath.Join(home, ".ssh", "known_hosts")}, files...)
	}
	return files
}

// sshAgentSpec resolves --ssh-agent KEY... against the developer's agent ($SSH_AUTH_SOCK)
// for a run with network a: nil without the flag; usage errors without a network, without
// an agent, or for a KEY no agent key matches.
func sshAgentSpec(specs []string, a *api.StartVMArgs) (*frontend.SSHAgent, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	if a.Egress == "" || a.Egress == "none" {
		return nil, usageErr("run: --ssh-agent needs a network (--egress): the agent signs only for code hosts the policy allows")
	}
	sock := os.Getenv("SSH_AUTH_SOCK")
	if sock == "" {
		return nil, usageErr("run: --ssh-agent: SSH_AUTH_SOCK is not set (no SSH agent to forward)")
	}
	dial := func() (agent.ExtendedAgent, io.Closer, error) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return nil, nil, fmt.Errorf("connect to the SSH agent %s: %w", sock, err)
		}
		return agent.NewClient(c), c, nil
	}
	up, c, err := dial()
	if err != nil {
		return nil, usageErr("run: --ssh-agent: %v", err)
	}
	defer c.Close()
	have, err := up.List()
	if err != nil {
		return nil, usageErr("run: --ssh-agent: list the keys of %s: %v", sock, err)
	}
	keys, err := sshagent.Resolve(specs, have)
	if err != nil {
		return nil, usageErr("run: %v", err)
	}
	a.SSHAgent = true
	// golang.org/x/crypto/ssh/agent.ServeAgent writes each request the filter refuses to
	// the standard logger, that is to stderr over the agent's terminal; the refusals go
	// to the run's summary instead. brood writes nothing else through the standard logger.
	log.SetOutput(io.Discard)
	return &frontend.SSHAgent{Keys: keys, KnownHosts: knownHostsFiles(), Dial: dial}, nil
}
