package helper

import (
	"context"
	"fmt"
	"path/filepath"

	"brood.dev/brood/internal/hostexec"
	"brood.dev/brood/sandbox"
	"brood.dev/brood/sandbox/qemu"
)

// probeVMBackend runs the QEMU backend's probe (version, and KVM only when it can really
// run a stock guest kernel).
func probeVMBackend(ctx context.Context) (sandbox.Capabilities, error) {
	return (&qemu.Backend{}).Probe(ctx)
}

// lookQEMU resolves qemu.Binary on the helper's (scrubbed) PATH to an absolute path,
// which the runner then executes as is.
func lookQEMU() (string, error) {
	p, err := hostexec.LookPath(qemu.Binary)
	if err != nil {
		return "", fmt.Errorf("find %s: %w", qemu.Binary, err)
	}
	return filepath.Abs(p)
}
