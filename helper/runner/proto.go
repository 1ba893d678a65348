package runner

import (
	"errors"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox"
)

// The control channel between the helper daemon and one runner is a Unix stream
// socketpair carrying api frames (4-byte length + strict JSON, descriptors by
// SCM_RIGHTS). The daemon sends Config first, then Requests; the runner answers with
// Events. The runner's descriptors are fixed (FD*): argv and environment carry nothing.

// Descriptor numbers in the runner (exec.Cmd.ExtraFiles order, starting at 3).
const (
	FDControl = 3 // the control socket (close-on-exec in the runner: the VMM never gets it)
	FDShare   = 4 // the workspace share directory from CreateSession
	FDRunDir  = 5 // the per-session run directory (the VMM's SSH socket lives here)
	FDKernel  = 6 // vmlinux
	FDInitrd  = 7 // the session initramfs (base + session config)
	FDImage   = 8 // the rootfs image
	FDCount   = 6 // descriptors 3..8
)

// SSHSocketName is the VMM's SSH socket in the session run directory.
const SSHSocketName = "ssh.sock"

// ConsoleTailMax is how much of the guest console an exit Event carries, in bytes
// (api.VMExit.ConsoleTail).
const ConsoleTailMax = 8 << 10

// AttachTimeout bounds how long a runner waits for the VMM's SSH socket to accept.
const AttachTimeout = 30 * time.Second

// ErrRunner reports a VM runner that failed to start, broke the control protocol, was
// handed a wrong descriptor or died without reporting how its VM ended.
var ErrRunner = errors.New("VM runner failed")

// Config is the daemon's first message to a runner.
type Config struct {
	Session    string        `json:"session"`
	Backend    string        `json:"backend"` // sandbox.Backend.Name of the VMM driver ("qemu")
	VMM        string        `json:"vmm"`     // absolute path of the VMM binary, resolved by the daemon
	Accel      sandbox.Accel `json:"accel"`   // the daemon's probe (sandbox.AccelKVM or AccelTCG)
	CPUs       int           `json:"cpus"`
	MemoryMiB  int           `json:"memory_mib"`
	TimeoutSec int           `json:"timeout_sec"`
	// Tap: the config frame carries the session's tap queue descriptor (the VM's only
	// network device); false: the VM has none.
	Tap bool `json:"tap,omitempty"`
	// RequireLandlock is the system policy's require_landlock: the runner refuses to start
	// the VMM unless the kernel enforces the pinned Landlock ABI (and its IPC scopes).
	RequireLandlock bool `json:"require_landlock,omitempty"`
}

// Op is Request.Op.
type Op string

// Runner requests.
const (
	OpAttach Op = "attach" // connect to the VMM's SSH socket and return the connected fd
	OpStop   Op = "stop"   // stop the VMM (graceful, then SIGKILL)
)

// Request is a later daemon → runner message.
type Request struct {
	Op Op `json:"op"`
}

// EventKind is Event.Event.
type EventKind string

// Runner events.
const (
	EvStarted  EventKind = "started"  // the VMM runs: Pid, and the VMM's pidfd when it could be opened
	EvAttached EventKind = "attached" // answer to OpAttach: one descriptor, or Detail on failure
	EvExit     EventKind = "exit"     // the VMM is gone: Outcome, Detail, ConsoleTail
	EvError    EventKind = "error"    // the VM could not start: Detail
)

// Event is a runner → daemon message.
type Event struct {
	Event       EventKind     `json:"event"`
	Pid         int           `json:"pid,omitempty"`
	Outcome     api.VMOutcome `json:"outcome,omitempty"`
	Detail      string        `json:"detail,omitempty"`
	ConsoleTail string        `json:"console_tail,omitempty"`
}
