package cli

import (
	"errors"
)

// Sentinel errors of package cli, checked with errors.Is (the workflow's are in package
// frontend).
var (
	// ErrUnknownAgent: `brood run` was given an agent that is neither built in nor in
	// the user config.
	ErrUnknownAgent = errors.New("unknown agent")
	// ErrConfig: the user config file is malformed (unknown key, bad agent).
	ErrConfig = errors.New("invalid config")
	// ErrNoImage reports a run whose image the helper has not built (checked before the
	// snapshot is taken).
	ErrNoImage = errors.New("image not built")
	// ErrDoctorFailed: brood doctor found a failing check (the command exits 1).
	ErrDoctorFailed = errors.New("doctor checks failed")
)
