package agentcfg

import "errors"

// Errors of Build, wrapped with the file they concern.
var (
	// ErrUnknownAgent: Build was asked for an agent it has no table entry for.
	ErrUnknownAgent = errors.New("not a built-in agent")
	// ErrMalformed: a host settings file does not parse (JSON or TOML).
	ErrMalformed = errors.New("malformed settings file")
)
