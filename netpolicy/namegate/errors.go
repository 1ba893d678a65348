package namegate

import "errors"

// Errors of the parsers. ErrIncomplete asks for more bytes; every other error refuses
// the connection.
var (
	ErrIncomplete = errors.New("incomplete")
	ErrTooLarge   = errors.New("larger than the gate reads")
	ErrNotTLS     = errors.New("not a TLS handshake record")
	ErrMalformed  = errors.New("malformed")
)
