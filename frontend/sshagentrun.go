package frontend

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/sshagent"
	"brood.dev/brood/helper/api"
)

// SSHAgent is the --ssh-agent part of a run: the developer's agent keys the guest may use
// (Keys, resolved by the caller with sshagent.Resolve), how to reach the developer's agent
// (Dial: one connection per guest agent connection), and the known_hosts files whose keys
// of the session's allowed code hosts bind signatures (KnownHosts).
type SSHAgent struct {
	Keys       []ssh.PublicKey
	KnownHosts []string
	Dial       func() (agent.ExtendedAgent, io.Closer, error)
}

// maxAgentLines bounds the refused agent requests the summary prints one by one.
const maxAgentLines = 20

// CodeHostsSSH returns the names of eg's allowed hosts that may be reached on TCP 22 (its
// Hosts entries "NAME (22/tcp, ...)"), leaving out wildcard patterns: the code hosts
// whose known_hosts keys a forwarded agent signs for.
func CodeHostsSSH(eg *api.EgressInfo) []string {
	if eg == nil {
		return nil
	}
	var out []string
	for _, h := range eg.Hosts {
		name, ports, ok := strings.Cut(h, " (")
		if !ok || strings.ContainsAny(name, "*?") {
			continue
		}
		for _, p := range strings.Split(strings.TrimSuffix(ports, ")"), ", ") {
			if p == "22/tcp" {
				out = append(out, name)
				break
			}
		}
	}
	return out
}

// agentPolicy builds the filter of the run's forwarded agent from the VM's network: the
// allowed code hosts on TCP 22 and their keys in the developer's known_hosts. It prints
// what the guest's agent can do, and fails when no code host has a known key.
func (v *runningVM) agentPolicy(info api.VMInfo) (*sshagent.Policy, error) {
	a := v.spec.SSHAgent
	hosts := CodeHostsSSH(info.Egress)
	hk, err := sshagent.HostKeys(a.KnownHosts, hosts)
	if err != nil {
		return nil, fmt.Errorf("--ssh-agent: %w", err)
	}
	var bound []string
	for _, h := range hosts {
		if n := len(hk[h]); n > 0 {
			bound = append(bound, fmt.Sprintf("%s (%d host key(s))", h, n))
		}
	}
	if len(bound) == 0 {
		return nil, fmt.Errorf("--ssh-agent: none of the session's code hosts on port 22 (%s) has a key in %s",
			diff.Escape(strings.Join(hosts, ", ")), diff.Escape(strings.Join(a.KnownHosts, ", ")))
	}
	var fps []string
	for _, k := range a.Keys {
		fps = append(fps, ssh.FingerprintSHA256(k))
	}
	v.prog.Printf("ssh-agent: the guest sees %s; it signs only SSH logins bound to %s", strings.Join(fps, ", "), strings.Join(bound, ", "))
	return &sshagent.Policy{Keys: a.Keys, HostKeys: hk, Upstream: a.Dial, Log: &sshagent.Log{}}, nil
}

// serveAgent answers the guest's agent connections (auth-agent@openssh.com channels of
// client) with pol until the connection ends, at most sshagent.MaxConns at once.
func serveAgent(client *ssh.Client, pol *sshagent.Policy) {
	chans := client.HandleChannelOpen("auth-agent@openssh.com")
	if chans == nil {
		return
	}
	go func() {
		for nc := range chans {
			done, ok := pol.Admit()
			if !ok {
				nc.Reject(ssh.ResourceShortage, "too many agent connections")
				continue
			}
			ch, reqs, err := nc.Accept()
			if err != nil {
				done()
				continue
			}
			go ssh.DiscardRequests(reqs)
			go func() {
				defer done()
				defer ch.Close()
				pol.Serve(ch)
			}()
		}
	}()
}

// printAgentLog prints the forwarded agent's signatures by host and every refused
// request (the first maxAgentLines one by one).
func printAgentLog(prog Progress, l *sshagent.Log) []sshagent.Event {
	ev, dropped := l.Events()
	signed := map[string]int{}
	var refused []sshagent.Event
	for _, e := range ev {
		switch {
		case e.Refused:
			refused = append(refused, e)
		case e.Op == "sign":
			signed[e.Host]++
		}
	}
	var parts []string
	total := 0
	for h, n := range signed {
		parts = append(parts, fmt.Sprintf("%d for %s", n, h))
		total += n
	}
	slices.Sort(parts)
	if total == 0 {
		prog.Printf("ssh-agent: 0 signatures, %d request(s) refused", len(refused)+dropped)
	} else {
		prog.Printf("ssh-agent: %d signature(s) (%s), %d request(s) refused", total, strings.Join(parts, ", "), len(refused)+dropped)
	}
	for i, e := range refused {
		if i == maxAgentLines {
			prog.Warn("ssh-agent: %d more refused request(s) (vm.json lists them)", len(refused)-i)
			break
		}
		prog.Warn("ssh-agent refused %s %s: %s", e.Op, e.Key, diff.Escape(e.Reason))
	}
	return ev
}
