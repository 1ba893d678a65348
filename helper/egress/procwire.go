package egress

import (
	"encoding/json"
	"net/netip"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress/tlsterm"
)

// ProxySubcommand is the hidden broodd-helper subcommand that runs one session's DNS
// proxy as an unprivileged process (ProxyMain).
const ProxySubcommand = "egress-proxy"

// Descriptors of the egress process (ProxyMain), after stdin, stdout and stderr: its end
// of the control socketpair (SOCK_SEQPACKET), the four DNS sockets the daemon bound on
// the session's tap addresses, and the name gate's two listening sockets (IPv4, IPv6).
const (
	procFDCtl = 3 + iota
	procFDUDP4
	procFDTCP4
	procFDUDP6
	procFDTCP6
	procFDGate4
	procFDGate6
	procFDCount = iota
)

// procMaxMsg bounds one control message, either way (bytes). A decision with its chain
// and addresses is a few KiB at most.
const procMaxMsg = 64 << 10

// procMaxPinAddrs bounds the addresses of one pin request (a DNS answer within the
// 1232-byte EDNS size holds fewer than 80 A records).
const procMaxPinAddrs = 128

// Control operations, process to daemon.
const (
	opCheck = "check" // may the session resolve Name? reply: OK, Why, Source, Ports
	opPin   = "pin"   // pin Addrs for Name, TimeoutS seconds. reply: OK (with the Ports and TimeoutS pinned) or Why
	// opLog's Decision is a DNS decision (dnsproxy.Decision) or a name gate decision
	// (namegate.Decision, with its "gate" field).
	opLog   = "log"   // append Decision to the session's decision log; no reply
	opPanic = "panic" // a handler panicked and was recovered; no reply
	// opSecret's Event is a TLS terminator event (names and hosts, never a value): the
	// daemon logs and counts it; no reply.
	opSecret = "secret"
	// opRefreshed's Refreshed is a login the terminator saw refreshed, with its new real
	// values: sent only when the bindings asked for write-back (SessionSecrets.WriteBack);
	// the daemon keeps it in memory for refreshed_logins and logs only its name; no reply.
	opRefreshed = "refreshed"
)

// procMsg is one request of the egress process to the daemon.
type procMsg struct {
	ID       uint64          `json:"id,omitempty"`
	Op       string          `json:"op"`
	Name     string          `json:"name,omitempty"`
	Addrs    []netip.Addr    `json:"addrs,omitempty"`
	TimeoutS int64           `json:"timeout_s,omitempty"`
	Decision json.RawMessage `json:"decision,omitempty"`
	Event    *tlsterm.Event  `json:"event,omitempty"`
	// Refreshed is opRefreshed's login.
	Refreshed *api.RefreshedLogin `json:"refreshed,omitempty"`
}

// procReply answers a procMsg with the same ID.
type procReply struct {
	ID     uint64   `json:"id"`
	OK     bool     `json:"ok"`
	Why    string   `json:"why,omitempty"`
	Source string   `json:"source,omitempty"`
	Ports  []string `json:"ports,omitempty"` // netpolicy.Port texts ("443/tcp")
	// TimeoutS is the pin's timeout as the daemon clamped it (seconds; pin replies).
	TimeoutS int64 `json:"timeout_s,omitempty"`
}
