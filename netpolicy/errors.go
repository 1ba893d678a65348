package netpolicy

import (
	"errors"
	"fmt"
)

// Errors returned by this package, checked with errors.Is. Every returned error wraps one of
// these with the operation and the offending value.
var (
	// ErrBadPattern: a host pattern is not an exact DNS name or "*." + a DNS name of at least
	// two labels (e.g. "*github.com", "a.*.com", "*", "exa mple.com").
	ErrBadPattern = errors.New("invalid host pattern")
	// ErrIPLiteral: a host name is an IP address in one of its spellings (ipForms:
	// "169.254.169.254", "[::1]", "2852039166", "0xa9.254.169.254", ...). Wraps
	// ErrBadPattern.
	ErrIPLiteral = fmt.Errorf("an IP address, not a host name: %w", ErrBadPattern)
	// ErrPublicSuffix: a wildcard's suffix is a public suffix ("*.co.uk", or "*.github.io"
	// outside the system policy; suffixRules). Wraps ErrBadPattern.
	ErrPublicSuffix = fmt.Errorf("wildcard over a public suffix: %w", ErrBadPattern)
	// ErrSpecialUse: an allowed name is, or is under, a special-use domain name that is
	// never answered by the public DNS ("localhost", "*.local", "home.arpa", ...;
	// specialUseNames). Wraps ErrBadPattern.
	ErrSpecialUse = fmt.Errorf("special-use domain name, never resolved by the public DNS: %w", ErrBadPattern)
	// ErrBadPort: a port/protocol entry is not "PORT", "PORT/tcp" or "PORT/udp" with
	// 1 <= PORT <= 65535.
	ErrBadPort = errors.New("invalid port")
	// ErrBadProfile: a profile name is not permissive, standard or locked.
	ErrBadProfile = errors.New("invalid egress profile")
	// ErrBadPolicy: a policy or configuration file does not parse or has unknown keys.
	ErrBadPolicy = errors.New("malformed policy")
	// ErrInsecurePolicyFile: the system policy file is not a regular file owned by root, or is
	// writable by group or others.
	ErrInsecurePolicyFile = errors.New("insecure system policy file")
	// ErrLoosen: a layer tried to loosen what a higher layer allows (raise the profile above
	// the cap, or a workspace file adding hosts).
	ErrLoosen = errors.New("layer may only tighten the policy")
	// ErrAllowHostForbidden: hosts were added by the user or --allow-host while the system
	// policy forbids it.
	ErrAllowHostForbidden = errors.New("adding hosts is forbidden by the system policy")
	// ErrBadAddress: a value is not exactly one IP address in canonical text form.
	ErrBadAddress = errors.New("not exactly one IP address")
	// ErrUnknownLogin: a session names a login (Inputs.Logins) that is not one of its
	// agent's built-in logins (BuiltinLogins).
	ErrUnknownLogin = errors.New("not a login of the agent")
)
