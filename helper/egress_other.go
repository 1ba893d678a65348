//go:build !linux

package helper

import (
	"fmt"
	"log/slog"

	"brood.dev/brood/helper/api"
)

// Egress is the VM network layer; VMs and their egress exist only on Linux.
type Egress struct{}

// StopAll does nothing: there is no egress on this system.
func (e *Egress) StopAll() {}

// Close does nothing.
func (e *Egress) Close() {}

// OpenEgress reports that egress needs Linux.
func OpenEgress(cfg *Config, h *host, log *slog.Logger) (*Egress, error) {
	return nil, fmt.Errorf("egress: %w", api.ErrUnavailable)
}
