package sshagent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// SessionBind is the name of OpenSSH's agent extension that binds an agent connection to
// an SSH session (OpenSSH PROTOCOL.agent, "session-bind@openssh.com").
const SessionBind = "session-bind@openssh.com"

// ErrRefused is what the guest's agent client gets for every request the filter refuses.
var ErrRefused = errors.New("refused by brood's SSH agent filter")

// Policy is what the filter lets through: signatures with Keys only, for user
// authentications bound to one of HostKeys' keys. Upstream opens a fresh connection to the
// developer's agent for each guest connection (binds are per connection).
type Policy struct {
	Keys     []ssh.PublicKey
	HostKeys map[string][]ssh.PublicKey // code host name → its keys (known_hosts)
	Upstream func() (agent.ExtendedAgent, io.Closer, error)
	Log      *Log

	mu    sync.Mutex
	conns int // guest connections being served (Admit)
}

// MaxConns is how many guest agent connections are served at once: each holds a
// connection to the developer's agent, so a guest that opens many does not exhaust
// brood's descriptors. One git fetch or push uses one.
const MaxConns = 8

// Admit reserves one of MaxConns connection slots; done releases it. A connection past
// them is refused (ok false) and logged.
func (p *Policy) Admit() (done func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == MaxConns {
		p.Log.add(Event{Op: "connect", Refused: true, Reason: fmt.Sprintf("more than %d agent connections at once", MaxConns)})
		return nil, false
	}
	p.conns++
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			p.conns--
			p.mu.Unlock()
		})
	}, true
}

// Event is one request the filter answered: Op ("sign", "list", "add", "remove",
// "remove-all", "lock", "unlock", "extension", "session-bind"), Key (the fingerprint of the
// key it named), Host (the allowed code host the connection is bound to), Refused and why.
type Event struct {
	Op      string `json:"op"`
	Key     string `json:"key,omitempty"`
	Host    string `json:"host,omitempty"`
	Refused bool   `json:"refused,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// maxEvents bounds a Log: a guest that floods the agent with requests does not fill
// memory; past it requests are counted (Log.Dropped).
const maxEvents = 1000

// Log records the filter's answers, in order, safe for concurrent use.
type Log struct {
	mu      sync.Mutex
	events  []Event
	dropped int
}

func (l *Log) add(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.events) == maxEvents {
		l.dropped++
		return
	}
	l.events = append(l.events, e)
}

// Events returns the recorded events and how many were not recorded past the bound.
func (l *Log) Events() ([]Event, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.events...), l.dropped
}

// Serve answers the agent requests of one guest connection rw until it ends, against a
// new connection to the developer's agent (Policy.Upstream). It returns the connection's
// error (nil at its end).
func (p *Policy) Serve(rw io.ReadWriter) error {
	up, closer, err := p.Upstream()
	if err != nil {
		return fmt.Errorf("ssh agent filter: connect to the developer's agent: %w", err)
	}
	defer closer.Close()
	err = agent.ServeAgent(&conn{p: p, up: up}, rw)
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// binding is one session-bind received on a connection.
type binding struct {
	host      string // the allowed code host whose key it is; "" when none
	hostKey   ssh.PublicKey
	sessionID []byte
}

// conn is the filter for one guest agent connection.
type conn struct {
	p     *Policy
	up    agent.ExtendedAgent
	mu    sync.Mutex
	bound *binding // the last session-bind; nil before one
}

var _ agent.ExtendedAgent = (*conn)(nil)

// listed reports whether key is one of the developer's listed keys.
func (c *conn) listed(key ssh.PublicKey) bool {
	b := key.Marshal()
	for _, k := range c.p.Keys {
		if bytes.Equal(k.Marshal(), b) {
			return true
		}
	}
	return false
}

// refuse records a refused request and returns ErrRefused.
func (c *conn) refuse(op, key, reason string) error {
	c.p.Log.add(Event{Op: op, Key: key, Host: c.boundHost(), Refused: true, Reason: reason})
	return fmt.Errorf("%s: %w: %s", op, ErrRefused, reason)
}

func (c *conn) boundHost() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bound == nil {
		return ""
	}
	return c.bound.host
}

// List returns the developer's agent's keys that are listed, nothing else.
func (c *conn) List() ([]*agent.Key, error) {
	keys, err := c.up.List()
	if err != nil {
		return nil, err
	}
	var out []*agent.Key
	for _, k := range keys {
		if c.listed(k) {
			out = append(out, k)
		}
	}
	return out, nil
}

// Sign is SignWithFlags without flags.
func (c *conn) Sign(key ssh.PublicKey, data []byte) (*ssh.Signature, error) {
	return c.SignWithFlags(key, data, 0)
}

// SignWithFlags signs data with key through the developer's agent when key is listed, the
// connection is bound to an allowed code host's key and data is a user authentication
// request for exactly that session with key (checkUserAuth).
func (c *conn) SignWithFlags(key ssh.PublicKey, data []byte, flags agent.SignatureFlags) (*ssh.Signature, error) {
	fp := ssh.FingerprintSHA256(key)
	if !c.listed(key) {
		return nil, c.refuse("sign", fp, "the key is not one --ssh-agent lists")
	}
	c.mu.Lock()
	b := c.bound
	c.mu.Unlock()
	switch {
	case b == nil:
		return nil, c.refuse("sign", fp, "the connection is not bound to an SSH session (no session-bind@openssh.com)")
	case b.host == "":
		return nil, c.refuse("sign", fp, fmt.Sprintf("the session is bound to host key %s, which no allowed code host has in known_hosts", ssh.FingerprintSHA256(b.hostKey)))
	}
	if err := checkUserAuth(data, b, key); err != nil {
		return nil, c.refuse("sign", fp, err.Error())
	}
	sig, err := c.up.SignWithFlags(key, data, flags)
	if err != nil {
		return nil, err
	}
	c.p.Log.add(Event{Op: "sign", Key: fp, Host: b.host})
	return sig, nil
}

// Add is refused.
func (c *conn) Add(agent.AddedKey) error { return c.refuse("add", "", "the guest may not add keys") }

// Remove is refused.
func (c *conn) Remove(key ssh.PublicKey) error {
	return c.refuse("remove", ssh.FingerprintSHA256(key), "the guest may not remove keys")
}

// RemoveAll is refused.
func (c *conn) RemoveAll() error { return c.refuse("remove-all", "", "the guest may not remove keys") }

// Lock is refused.
func (c *conn) Lock([]byte) error { return c.refuse("lock", "", "the guest may not lock the agent") }

// Unlock is refused.
func (c *conn) Unlock([]byte) error {
	return c.refuse("unlock", "", "the guest may not unlock the agent")
}

// Signers is refused (agent.ServeAgent never calls it).
func (c *conn) Signers() ([]ssh.Signer, error) {
	return nil, c.refuse("signers", "", "not served")
}

// Extension accepts session-bind@openssh.com (bind) and refuses every other extension.
func (c *conn) Extension(name string, contents []byte) ([]byte, error) {
	if name != SessionBind {
		c.refuse("extension", "", fmt.Sprintf("extension %q is not served", name))
		return nil, agent.ErrExtensionUnsupported
	}
	if err := c.bind(contents); err != nil {
		return nil, c.refuse("session-bind", "", err.Error())
	}
	return nil, nil
}
