package helper

import (
	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox"
)

// The control channel between the helper and one VM runner (`broodd-helper vm-run`) is a
// Unix stream socketpair carrying api frames (4-byte length + strict JSON, descriptors by
// SCM_RIGHTS). The helper sends runnerConfig first, then runnerRequests; the runner
// answers with runnerEvents. The runner's descriptors are fixed (runnerFD*): argv and
// environment carry nothing.

// Descriptor numbers in the runner (exec.Cmd.ExtraFiles order, starting at 3).
const (
	runnerFDControl = 3 // the control socket (close-on-exec in the runner: QEMU never gets it)
	runnerFDShare   = 4 // the workspace share directory from CreateSession
	runnerFDRunDir  = 5 // the per-session run directory (the VMM's SSH socket lives here)
	runnerFDKernel  = 6 // vmlinux
	runnerFDInitrd  = 7 // the session initramfs (base + session config)
	runnerFDImage   = 8 // the rootfs image
	runnerFDCount   = 6 // descriptors 3..8
)

// sshSocketName is the VMM's SSH socket in the session run directory.
const sshSocketName = "ssh.sock"

// consoleTailMax is how much of the guest console a VMExit carries (api.VMExit).
const consoleTailMax = 8 << 10

// runnerConfig is the helper's first message to a runner.
type runnerConfig struct {
	Session    string        `json:"session"`
	QEMU       string        `json:"qemu"`  // absolute path of qemu-system-*, resolved by the helper
	Accel      sandbox.Accel `json:"accel"` // the helper's probe (sandbox.AccelKVM or AccelTCG)
	CPUs       int           `json:"cpus"`
	MemoryMiB  int           `json:"memory_mib"`
	TimeoutSec int           `json:"timeout_sec"`
	// Tap: the config frame carries the session's tap queue descriptor (the VM's only
	// network device); false: the VM has none.
	Tap bool `json:"tap,omitempty"`
}

// runnerOp is runnerRequest.Op.
type runnerOp string

// Runner requests.
const (
	opAttach runnerOp = "attach" // connect to the VMM's SSH socket and return the connected fd
	opStop   runnerOp = "stop"   // stop the VMM (graceful, then SIGKILL)
)

// runnerRequest is a later helper → runner message.
type runnerRequest struct {
	Op runnerOp `json:"op"`
}

// runnerEventKind is runnerEvent.Event.
type runnerEventKind string

// Runner events.
const (
	evStarted  runnerEventKind = "started"  // the VMM runs: Pid
	evAttached runnerEventKind = "attached" // answer to opAttach: one descriptor, or Detail on failure
	evExit     runnerEventKind = "exit"     // the VMM is gone: Outcome, Detail, ConsoleTail
	evError    runnerEventKind = "error"    // the VM could not start: Detail
)

// runnerEvent is a runner → helper message.
type runnerEvent struct {
	Event       runnerEventKind `json:"event"`
	Pid         int             `json:"pid,omitempty"`
	Outcome     api.VMOutcome   `json:"outcome,omitempty"`
	Detail      string          `json:"detail,omitempty"`
	ConsoleTail string          `json:"console_tail,omitempty"`
}
