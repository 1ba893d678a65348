// Package frontend is the session workflow of brood as a library: Run (snapshot, VM,
// attached agent, stop, the diff of the stopped session), OpenGate (a kept session's
// changes), Review, Apply, Undo and Stop. It has no command line and prints nothing of
// its own: progress goes through the caller's Progress, the agent's terminal through the
// caller's Stdio, and every result is returned as a value the caller prints (the cobra
// commands of package frontend/cli do). The helper is reached through the small interface of
// package frontend/helperclient, so tests drive a whole run against frontend/fakehelper.
//
// Privilege: none; it runs in brood as the developer and must never link helper/,
// nftables, netlink or Landlock code (frontend/deps_test.go).
package frontend

import (
	"errors"
	"time"

	"brood.dev/brood/frontend/helperclient"
	"brood.dev/brood/frontend/session"
)

// Workflow drives sessions against one helper. The zero value is not usable: Helper must
// be set (Progress may be nil: then nothing is reported).
type Workflow struct {
	// Helper opens helper connections (helperclient.Socket in brood).
	Helper helperclient.Helper
	// Progress receives the steps of a run and its notes and warnings.
	Progress Progress
	// HelperHint, when set, returns advice appended (after a newline) to the error of a
	// helper that cannot be reached (the CLI's "is broodd-helper running?").
	HelperHint func(err error) string
	// PoweroffWait is how long the guest gets to power off by itself after the SSH
	// connection ends before Run asks the helper to stop it (0: DefaultPoweroffWait).
	PoweroffWait time.Duration
	// Flush, when set, replaces flush.Apply (tests feed apply and review one result).
	Flush FlushFunc
	// CountRefs, when set, returns how many refs the agent moved or created in the
	// repository at the root of the session's workspace (the CLI's git review), for the
	// result of a run's diff step ("2 change(s), 1 ref(s)").
	CountRefs func(*session.Session) int
}

// Progress reports the steps of a run (a spinner on a terminal, plain lines in logs).
// Start begins a step and ends one still running as done; Done and Fail end the running
// step with a short result ("" for none); Printf and Warn print a note or a loud
// warning line. Strings that come from the guest or the workspace are escaped first.
type Progress interface {
	Start(step string)
	Done(result string)
	Fail(result string)
	Printf(format string, a ...any)
	Warn(format string, a ...any)
}

// DefaultPoweroffWait is Workflow.PoweroffWait's default: brood-guest powers off within
// about a second of its SSH session ending, so 15 s means it will not by itself.
const DefaultPoweroffWait = 15 * time.Second

// Sentinel errors of package frontend, checked with errors.Is.
var (
	// ErrVMOutcome: the VM ended abnormally (timeout, failure) before or while the agent
	// ran; the session is kept.
	ErrVMOutcome = errors.New("VM ended abnormally")
	// ErrDetached: the developer pressed the detach key (Ctrl-]); the VM was stopped.
	ErrDetached = errors.New("detached")
	// ErrNoHelperSession: a session marked running records no helper session id, so its
	// VM cannot be named to the helper.
	ErrNoHelperSession = errors.New("no helper session recorded")
)

// InvalidError marks an error of the request itself (a workspace that is not a
// directory, a path outside the workspace); the CLI exits 2 for it. It prints as Err.
type InvalidError struct{ Err error }

func (e *InvalidError) Error() string { return e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

// RefusedError marks "something was refused or in conflict" (a flush refusal, a VM still
// running); the CLI exits 3 for it. It prints as Err.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// progress is w.Progress, or one that drops everything when it is nil.
func (w *Workflow) progress() Progress {
	if w.Progress == nil {
		return noProgress{}
	}
	return w.Progress
}

// noProgress reports nothing.
type noProgress struct{}

func (noProgress) Start(string)          {}
func (noProgress) Done(string)           {}
func (noProgress) Fail(string)           {}
func (noProgress) Printf(string, ...any) {}
func (noProgress) Warn(string, ...any)   {}

func (w *Workflow) poweroffWait() time.Duration {
	if w.PoweroffWait > 0 {
		return w.PoweroffWait
	}
	return DefaultPoweroffWait
}

// hinted appends w.HelperHint's advice to a helper connection error.
func (w *Workflow) hinted(err error) error {
	if w.HelperHint == nil {
		return err
	}
	return &hintError{err: err, hint: w.HelperHint(err)}
}

// hintError prints as "ERR\nHINT" and unwraps to ERR.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() + "\n" + e.hint }
func (e *hintError) Unwrap() error { return e.err }
