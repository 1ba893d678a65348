// Package tlsterm is the TLS-terminating HTTP proxy of the per-session egress process:
// for a host that may receive a secret it ends the guest's TLS with a certificate of the
// session's own CA, checks every request, swaps the placeholders the guest holds for the
// real values bound to that host, and sends the request on over a new TLS connection to
// the real host, verified against the host's trust store.
//
// The contract of Terminator.Terminate, for one guest connection whose ClientHello named
// SNI and whose destination address dst was pinned for that name:
//
//  1. The ClientHello's server name must equal SNI, and the CA must cover SNI
//     (NewCA's names); the leaf certificate is minted once per name and cached.
//  2. ALPN offers h2 and http/1.1. Every request on the connection, HTTP/2 streams
//     included, must carry Host (HTTP/1.1) or :authority (HTTP/2) equal to SNI, on port
//     443 or none; otherwise it is refused.
//  3. Placeholders are looked for in every header name and value (inside HTTP Basic
//     credentials too), in the URL's path and query, and in the body. A placeholder
//     bound to SNI is replaced by its real value in header values and the URL, and in
//     the body of a POST to one of its login's token endpoints (form or JSON, escaped for
//     the body's type); a refresh token's only there. A placeholder bound elsewhere (or
//     to no host), a refresh token's anywhere else, or any in a header name refuses the
//     request.
//  4. A body it cannot inspect is refused: a compressed one (Content-Encoding other than
//     identity) over MaxBody bytes, or of an encoding it cannot decode, or one that
//     decodes to more than MaxDecoded bytes; a token-endpoint body over MaxBody. A
//     compressed body that decodes to any placeholder is refused (it is not swapped).
//     Other bodies stream through a scanner that holds back the last bytes of each read
//     until the placeholder search has seen them, so no placeholder bound elsewhere is
//     sent; they are not buffered. Protocol upgrades (WebSocket) are refused: what
//     follows an upgrade could not be inspected.
//  5. Refused requests get HTTP 403, an Event and a count in Stats; no value (real or
//     placeholder) is ever put in an event, a log line or an error.
//  6. A token-endpoint response carrying new tokens (access_token, refresh_token,
//     id_token) is rewritten: each new real value gets a new placeholder of its shape,
//     which the guest receives; the binding table learns the new value and keeps the
//     older ones. A token response that cannot be rewritten (compressed against the
//     request's wishes, too large, not JSON) becomes a 502. Only when the session asked
//     for write-back of login files (Terminator.OnRefresh) does the login's new real
//     values leave the terminator, to that callback.
//  7. Responses stream as they arrive (server-sent events flush at once); in an
//     identity-coded response every real value of the table is replaced by its
//     placeholder (a compressed response is not searched).
//
// The real values live only in the Bindings of this process's memory (and, refreshed
// ones, in the OnRefresh callback's hands); the CA's private key too, and only its
// certificate (CA.CertPEM) leaves the process.
//
// Privilege: none; it runs inside the session's unprivileged egress process (the session
// owner's uid, no_new_privs, Landlock) and parses guest traffic.
package tlsterm
