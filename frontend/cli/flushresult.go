package cli

import (
	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/flush"
)

// flushApply is flush.Apply, the workflow's flush; tests replace it to feed both `brood
// apply` and `brood review` one result.
var flushApply frontend.FlushFunc = flush.Apply

// flushResultErr is the exit status of a flush result for `brood apply` and `brood
// review` (op names the command and session, "apply session ID"): the workflow's one
// classifier (frontend.FlushError) with its refusal mapped to ExitRefused.
func flushResultErr(op string, res flush.Result, err error) error {
	return cliErr(frontend.FlushError(op, res, err))
}
