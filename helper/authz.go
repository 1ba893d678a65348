package helper

import (
	"fmt"
	"slices"

	"brood.dev/brood/helper/api"
)

// Cred is what the kernel told the helper about a peer at accept (SO_PEERCRED plus
// SO_PEERGROUPS on Linux; LOCAL_PEERCRED on macOS). It is the only source of identity:
// never request fields, socket addresses or environment.
type Cred struct {
	api.Peer
	// Groups are the peer's supplementary group ids at connect time.
	Groups []uint32
}

// Decision is the outcome of Authorize, with the reason logged to the audit log.
type Decision struct {
	Allowed bool
	Reason  string
}

// Authorize is the one function that decides who may use the helper: root, a uid listed
// in allowUIDs, or a peer whose primary or supplementary group is in allowGIDs. Empty
// lists admit nobody but root.
func Authorize(c Cred, allowUIDs, allowGIDs []uint32) Decision {
	switch {
	case c.UID == 0:
		return Decision{true, "uid 0 (root)"}
	case slices.Contains(allowUIDs, c.UID):
		return Decision{true, fmt.Sprintf("uid %d is in allow_uids", c.UID)}
	case slices.Contains(allowGIDs, c.GID):
		return Decision{true, fmt.Sprintf("primary gid %d is allowed", c.GID)}
	}
	for _, g := range c.Groups {
		if slices.Contains(allowGIDs, g) {
			return Decision{true, fmt.Sprintf("member of allowed gid %d", g)}
		}
	}
	return Decision{false, fmt.Sprintf("uid %d is not root, not in allow_uids and in no allowed group %v", c.UID, allowGIDs)}
}
