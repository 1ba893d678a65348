package helper

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress"
)

// Accept back-off bounds: after an accept error that is a resource shortage (acceptRetryable)
// the loop waits acceptBackoffMin, doubling per consecutive failure up to acceptBackoffMax,
// then tries again. 5 ms lets a descriptor freed by a closing connection be reused at once;
// 1 s bounds the delay a new client sees once descriptors are free again.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// acceptRetryable reports whether an accept error is a shortage the helper outlives rather
// than a closed listener: EMFILE and ENFILE (descriptor limits, accept(2)), ENOBUFS and
// ENOMEM (socket memory), ECONNABORTED and EINTR (the peer or a signal, not the listener).
func acceptRetryable(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS,
		syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// acceptBackoff is the wait before the next accept after n consecutive retryable failures
// (n >= 1): acceptBackoffMin * 2^(n-1), at most acceptBackoffMax.
func acceptBackoff(n int) time.Duration {
	d := acceptBackoffMin
	for i := 1; i < n && d < acceptBackoffMax; i++ {
		d *= 2
	}
	return min(d, acceptBackoffMax)
}

// Health counts what the helper survived since it started: accept failures it backed off
// from and panics recovered in call handlers. Doctor reports it, with the DNS proxies'
// recovered panics (egress.ProxyPanics).
type Health struct {
	AcceptErrors atomic.Int64
	Panics       atomic.Int64
}

// Check renders h as a doctor check: OK while no handler has panicked.
func (h *Health) Check() api.Check {
	p, a, dp := h.Panics.Load(), h.AcceptErrors.Load(), egress.ProxyPanics()
	return api.Check{Name: "helper health", OK: p == 0 && dp == 0, Warn: a > 0,
		Detail: fmt.Sprintf("%d handler panics recovered, %d DNS proxy panics recovered, %d accept errors backed off since start", p, dp, a)}
}

// errPanic is the error a call gets when its handler panicked (an internal error: the
// client sees only that the helper's log has the details).
var errPanic = errors.New("handler panicked")

// recoverHandler turns a panic of the running call handler into an internal error in
// *err, logs it with its stack and counts it in s.health. Use as `defer s.recoverHandler(call, &err)`.
func (s *Server) recoverHandler(call *string, uid uint32, err *error) {
	v := recover()
	if v == nil {
		return
	}
	s.health.Panics.Add(1)
	s.log.Error("call handler panicked; recovered", "call", *call, "uid", uid,
		"panic", fmt.Sprint(v), "stack", string(debug.Stack()), "panics", s.health.Panics.Load())
	*err = fmt.Errorf("call %q: %w", *call, errPanic)
}
