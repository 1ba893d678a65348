package egress

import "errors"

// Sentinel errors of package egress, checked with errors.Is. Errors sent to clients wrap
// the typed sentinels of package api (api.ErrPolicy, api.ErrLimit, ...).
var (
	// ErrConfig reports an invalid [egress] setting or a request to set forwarding on
	// something that is not a single interface.
	ErrConfig = errors.New("invalid egress configuration")
	// ErrNoIPv6Forwarding reports a kernel without per-interface IPv6 forwarding
	// (net.ipv6.conf.<if>.force_forwarding, Linux >= 6.17) or without IPv6: guests then
	// get no IPv6 address or route, never the global forwarding switch.
	ErrNoIPv6Forwarding = errors.New("no per-interface IPv6 forwarding")
)
