package tlsterm

import "errors"

// ErrName reports a TLS server name that the CA does not cover or that differs from the
// SNI the connection was admitted for.
var ErrName = errors.New("server name not terminated")

// errBlocked marks a request body read that found a placeholder bound elsewhere.
var errBlocked = errors.New("request refused")
