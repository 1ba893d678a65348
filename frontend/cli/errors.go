package cli

import (
	"errors"

	"brood.dev/brood/frontend"
)

// Sentinel errors of package cli, checked with errors.Is.
var (
	// ErrUnknownAgent: `brood run` was given an agent that is neither built in nor in
	// the user config.
	ErrUnknownAgent = errors.New("unknown agent")
	// ErrConfig: the user config file is malformed (unknown key, bad agent).
	ErrConfig = errors.New("invalid config")
	// ErrVMOutcome: the VM ended abnormally (timeout, failure) before or while the agent
	// ran; the session is kept.
	ErrVMOutcome = frontend.ErrVMOutcome
	// ErrDetached: the developer pressed the detach key (Ctrl-]); the VM was stopped.
	ErrDetached = frontend.ErrDetached
	// ErrNoImage reports a run whose image the helper has not built (checked before the
	// snapshot is taken).
	ErrNoImage = errors.New("image not built")
	// ErrNoHelperSession: a session marked running records no helper session id, so its
	// VM cannot be named to the helper.
	ErrNoHelperSession = frontend.ErrNoHelperSession
	// ErrDoctorFailed: brood doctor found a failing check (the command exits 1).
	ErrDoctorFailed = errors.New("doctor checks failed")
)
