package sshagent

import (
	"bytes"
	"errors"
	"fmt"

	"golang.org/x/crypto/ssh"
)

// sessionBindMsg is the body of a session-bind@openssh.com request after the extension
// name (OpenSSH PROTOCOL.agent §"session-bind"): the server's host key, the session
// identifier (the exchange hash of the session's first key exchange, RFC 4253 §7.2), the
// server's signature of that identifier with the host key, and whether the connection
// the agent is bound to will forward the agent.
type sessionBindMsg struct {
	HostKey    []byte
	SessionID  []byte
	Signature  []byte
	Forwarding bool
}

// maxSessionID bounds a session identifier: a hash output (SHA-512 is 64 bytes, RFC 4253
// §7.2 with the hashes of RFC 8268 and RFC 8731).
const maxSessionID = 64

// bind parses and verifies one session-bind and records it as the connection's binding:
// the host key must have signed the session identifier; a bind for a connection that
// forwards the agent further is refused (the guest's agent reaches code hosts only, which
// take no forwarded agent); a second bind is refused (OpenSSH's ssh binds each agent
// connection once).
func (c *conn) bind(contents []byte) error {
	var m sessionBindMsg
	if err := ssh.Unmarshal(contents, &m); err != nil {
		return fmt.Errorf("malformed session-bind: %w", err)
	}
	hk, err := ssh.ParsePublicKey(m.HostKey)
	if err != nil {
		return fmt.Errorf("session-bind host key: %w", err)
	}
	if len(m.SessionID) == 0 || len(m.SessionID) > maxSessionID {
		return fmt.Errorf("session-bind: session identifier of %d bytes", len(m.SessionID))
	}
	var sig ssh.Signature
	if err := ssh.Unmarshal(m.Signature, &sig); err != nil {
		return fmt.Errorf("session-bind signature: %w", err)
	}
	if err := hk.Verify(m.SessionID, &sig); err != nil {
		return fmt.Errorf("session-bind: host key %s did not sign the session identifier: %w", ssh.FingerprintSHA256(hk), err)
	}
	if m.Forwarding {
		return errors.New("session-bind for a connection that forwards the agent further")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bound != nil {
		return errors.New("the connection is already bound to a session")
	}
	c.bound = &binding{host: c.p.hostOf(hk), hostKey: hk, sessionID: m.SessionID}
	c.p.Log.add(Event{Op: "session-bind", Key: ssh.FingerprintSHA256(hk), Host: c.bound.host})
	return nil
}

// hostOf returns the allowed code host that has key, "" when none.
func (p *Policy) hostOf(key ssh.PublicKey) string {
	b := key.Marshal()
	for host, keys := range p.HostKeys {
		for _, k := range keys {
			if bytes.Equal(k.Marshal(), b) {
				return host
			}
		}
	}
	return ""
}

// userAuthMsg is an SSH_MSG_USERAUTH_REQUEST for the "publickey" method with a signature,
// as the signed data holds it (RFC 4252 §7): the session identifier first, then the
// message without its signature.
type userAuthMsg struct {
	SessionID []byte
	Type      byte
	User      string
	Service   string
	Method    string
	HasSig    bool
	Algo      string
	PubKey    []byte
	Rest      []byte `ssh:"rest"` // publickey-hostbound-v00@openssh.com: the host key
}

// Methods of a signed user authentication (RFC 4252 §7; OpenSSH PROTOCOL
// "publickey-hostbound-v00@openssh.com").
const (
	msgUserAuthRequest = 50
	methodPublicKey    = "publickey"
	methodHostBound    = "publickey-hostbound-v00@openssh.com"
)

// checkUserAuth accepts data only when it is the signed part of a public-key user
// authentication for the bound session with key: its session identifier is b's, the
// service is ssh-connection, the key is key, and a host-bound request names b's host key.
// Anything else (a signature of arbitrary data, of another session) is an error.
func checkUserAuth(data []byte, b *binding, key ssh.PublicKey) error {
	var m userAuthMsg
	if err := ssh.Unmarshal(data, &m); err != nil {
		return errors.New("the data to sign is not a user authentication request")
	}
	switch {
	case m.Type != msgUserAuthRequest || !m.HasSig:
		return errors.New("the data to sign is not a user authentication request")
	case !bytes.Equal(m.SessionID, b.sessionID):
		return errors.New("the user authentication is for another session than the bound one")
	case m.Service != "ssh-connection":
		return fmt.Errorf("the user authentication is for service %q", m.Service)
	case !bytes.Equal(m.PubKey, key.Marshal()):
		return errors.New("the user authentication names another key")
	}
	switch m.Method {
	case methodPublicKey:
		if len(m.Rest) != 0 {
			return errors.New("trailing data after the user authentication request")
		}
	case methodHostBound:
		var hb struct {
			HostKey []byte
		}
		if err := ssh.Unmarshal(m.Rest, &hb); err != nil || !bytes.Equal(hb.HostKey, b.hostKey.Marshal()) {
			return errors.New("the host-bound user authentication names another host key")
		}
	default:
		return fmt.Errorf("the user authentication method %q signs nothing here", m.Method)
	}
	return nil
}
