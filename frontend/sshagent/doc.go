// Package sshagent is the filtered SSH agent `brood run --ssh-agent` forwards to the guest:
// it stands between the developer's own agent (SSH_AUTH_SOCK) and every agent connection
// the guest opens, shows only the keys the developer listed, and signs only a user
// authentication for an SSH session bound (OpenSSH's session-bind@openssh.com extension)
// to a host key that the developer's known_hosts holds for a code host the session's
// policy allows. Every other request (adding, removing or listing other keys, locking, an
// unbound signature, a signature for another host key or another session, any other
// extension) is refused and recorded for the run's summary (Log).
//
// The pieces: Resolve (which agent keys the developer's KEY arguments name),
// HostKeys (the allowed code hosts' keys from known_hosts), Policy.Serve (one guest agent
// connection against a fresh connection to the developer's agent) and Log.
//
// Privilege: none; it runs in brood as the developer, talking to the developer's agent.
package sshagent
