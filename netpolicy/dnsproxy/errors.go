package dnsproxy

import "errors"

// Errors returned by this package, checked with errors.Is.
var (
	// ErrConfig: a Config lacks its policy, upstream or pinner, or has inverted TTL bounds.
	ErrConfig = errors.New("invalid DNS proxy config")
	// ErrUpstream: the upstream resolver did not answer, or answered something else than
	// the question asked.
	ErrUpstream = errors.New("upstream resolver failed")
)
