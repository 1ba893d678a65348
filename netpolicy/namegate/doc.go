// Package namegate is the SNI/Host gate of a session's egress: it holds the guest's TCP
// connections to ports 443 and 80, which the session's nft chains redirect to it, reads
// the TLS ClientHello (port 443) or the HTTP/1.x request head (port 80), and lets a
// connection through only when the name it carries (SNI or Host) is one the session
// resolved through brood's DNS proxy to exactly the connection's original destination.
// An admitted connection is spliced to that destination (no decryption): the bytes read
// are replayed first, then both directions are copied with half-close. A refused one is
// reset (SO_LINGER 0) and logged.
//
// Names holds what the gate admits: per name the addresses pinned for it, with their
// ports and expiry; the DNS proxy's pinner feeds it after each pin the helper accepted.
// ParseClientHello and ParseHTTPHost are the parsers (pure, fuzzed); Gate serves a
// listener.
//
// Privilege: none. The gate runs in the session's unprivileged egress process, on a
// listener the root helper bound; it reads SO_ORIGINAL_DST (conntrack) of its own
// sockets and dials the original destination as that process.
package namegate
