// Package landlockabi is the one pin of the Landlock ABI that brood's rulesets (the
// helper daemon's and the VM runner's) are written and tested for, and the probe of the
// kernel's ABI.
//
// Privilege: none of its own; linked by the helper daemon (root) and the VM runner (the
// session owner's uid), which apply their rulesets at this ABI.
package landlockabi

import (
	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// Pinned is the Landlock ABI the rulesets are written and tested for (ABI 7: filesystem,
// TCP bind/connect, IPC scopes; tested on kernel 6.18). On a newer kernel exactly the
// ABI 7 rights are enforced; below it a caller either refuses or runs an explicit,
// logged best-effort mode.
const Pinned = 7

// Config is the go-landlock configuration of Pinned (landlock.V7). It is a value: callers
// copy it and adjust their copy (scopes they cannot use).
var Config = landlock.V7

// Kernel reports the running kernel's Landlock ABI (landlock_create_ruleset(2) with
// LANDLOCK_CREATE_RULESET_VERSION); an error means no Landlock.
func Kernel() (int, error) { return llsys.LandlockGetABIVersion() }
