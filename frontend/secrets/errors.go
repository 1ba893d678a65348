package secrets

import "errors"

// ErrMalformedLogin reports a host login file that is not the JSON its CLI writes.
var ErrMalformedLogin = errors.New("malformed login file")

// ErrForbidden reports an option the system policy forbids (--git-token).
var ErrForbidden = errors.New("forbidden by the system policy")
