package api

// The string enums of the wire protocol. Each is a named type with its values as typed
// constants, so that the helper, the runner and the CLI spell a value only through these
// names: renaming one fails to compile instead of silently changing the protocol. The
// string values are the protocol (TestEnumWireValues pins them, and the Call names of
// api.go). The accelerator of
// Capabilities.Accel and VMInfo.Accel is sandbox.Accel, the backends' own type.

// SessionState is Session.State: created → running (StartVM) → stopped (the VMM is gone).
// A session boots at most one VM.
type SessionState string

// Session states.
const (
	SessionCreated SessionState = "created"
	SessionRunning SessionState = "running"
	SessionStopped SessionState = "stopped"
)

// VMOutcome is VMExit.Outcome: how the VMM process ended.
type VMOutcome string

// VM outcomes.
const (
	OutcomePoweroff VMOutcome = "poweroff" // the guest shut down cleanly
	OutcomeStopped  VMOutcome = "stopped"  // StopVM (or the client stopped it)
	OutcomeTimeout  VMOutcome = "timeout"  // the VM's lifetime passed; the VMM was killed
	OutcomeFailed   VMOutcome = "failed"   // any other exit
)

// LandlockMode is Landlock.Mode: how far the helper is confined.
type LandlockMode string

// Landlock modes.
const (
	LandlockEnforced LandlockMode = "enforced" // the pinned ruleset is applied
	LandlockDegraded LandlockMode = "degraded" // weaker or no confinement, allowed by config
	LandlockOff      LandlockMode = "off"      // development: --no-landlock
)
