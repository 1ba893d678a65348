//go:build !linux

package helper

import (
	"fmt"
	"log/slog"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
)

// Egress is the VM network layer; VMs and their egress exist only on Linux.
type Egress struct{}

// StopAll does nothing: there is no egress on this system.
func (e *Egress) StopAll() {}

// Resolve reports that egress needs Linux.
func (e *Egress) Resolve(api.ResolvePolicyArgs) (*netpolicy.Effective, string, error) {
	return nil, "", fmt.Errorf("resolve egress policy: %w", api.ErrUnavailable)
}

// Close does nothing.
func (e *Egress) Close() {}

// OpenEgress reports that egress needs Linux.
func OpenEgress(cfg *Config, h *host, log *slog.Logger) (*Egress, error) {
	return nil, fmt.Errorf("egress: %w", api.ErrUnavailable)
}
