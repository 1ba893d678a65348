package api

import "errors"

// Code classifies an Error so that the CLI can print a hint; the Message is for humans.
type Code string

// Error codes on the wire.
const (
	CodeBadRequest       Code = "bad_request"       // malformed frame, unknown field, invalid value
	CodeUnknownCall      Code = "unknown_call"      // no such call
	CodeHelloRequired    Code = "hello_required"    // the first call on a connection must be hello
	CodeVersionMismatch  Code = "version_mismatch"  // client and helper speak different versions
	CodePermissionDenied Code = "permission_denied" // not authorized, or another user's session
	CodeNotFound         Code = "not_found"         // no such session
	CodeBadFD            Code = "bad_fd"            // a passed descriptor failed its checks
	CodeTooLarge         Code = "frame_too_large"   // frame body over MaxFrame
	CodeLimit            Code = "limit"             // a per-user or global limit was reached
	CodeState            Code = "bad_state"         // the session is not in a state that allows the call
	CodeUnavailable      Code = "unavailable"       // a VM artifact (kernel, initramfs, image) or backend is missing
	CodeInternal         Code = "internal"          // the helper failed; see its log
	CodePolicy           Code = "policy"            // the egress policy refused the request, or cannot be read
	// CodeHostResources: StartVM asked for more vCPUs or memory than the host has
	// (HostLimits in the message); added in protocol 1 without a version change.
	CodeHostResources Code = "host_resources"
)

// Error is a typed protocol error (code + message). It matches the sentinel of its code
// with errors.Is, so callers can write errors.Is(err, api.ErrPermissionDenied).
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return e.Message
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code
}

// Sentinel errors, one per code, for errors.Is and for wrapping on the helper side.
var (
	ErrBadRequest       = &Error{Code: CodeBadRequest, Message: "bad request"}
	ErrUnknownCall      = &Error{Code: CodeUnknownCall, Message: "unknown call"}
	ErrHelloRequired    = &Error{Code: CodeHelloRequired, Message: "hello required first"}
	ErrVersionMismatch  = &Error{Code: CodeVersionMismatch, Message: "protocol version mismatch"}
	ErrPermissionDenied = &Error{Code: CodePermissionDenied, Message: "permission denied"}
	ErrNotFound         = &Error{Code: CodeNotFound, Message: "not found"}
	ErrBadFD            = &Error{Code: CodeBadFD, Message: "bad descriptor"}
	ErrTooLarge         = &Error{Code: CodeTooLarge, Message: "frame too large"}
	ErrLimit            = &Error{Code: CodeLimit, Message: "limit reached"}
	ErrState            = &Error{Code: CodeState, Message: "session state does not allow this call"}
	ErrUnavailable      = &Error{Code: CodeUnavailable, Message: "VM artifact or backend unavailable"}
	ErrInternal         = &Error{Code: CodeInternal, Message: "internal error"}
	ErrPolicy           = &Error{Code: CodePolicy, Message: "egress policy refused"}
	ErrHostResources    = &Error{Code: CodeHostResources, Message: "more vCPUs or memory than the host has"}
)

// ErrTruncated reports a frame cut short by the end of the stream.
var ErrTruncated = errors.New("truncated frame")

// ErrFDCount reports a frame whose received descriptors differ from what it declared.
var ErrFDCount = errors.New("descriptor count mismatch")

// AsError converts err into the wire error the helper sends: a wrapped *Error keeps its
// code and gets err's full text as message; anything else becomes CodeInternal.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return &Error{Code: e.Code, Message: err.Error()}
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

// ErrBadSecrets reports a SessionSecrets that breaks its limits or field contracts
// (SessionSecrets.Validate).
var ErrBadSecrets = errors.New("invalid session secrets")
