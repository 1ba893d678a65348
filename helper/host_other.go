//go:build !linux

package helper

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
)

// host is unavailable off Linux: the macOS helper (pf, vmnet) is not written yet.
type host struct{}

func openHost(string) (*host, error) {
	return nil, fmt.Errorf("open host network seams on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

func (h *host) cleanup(*slog.Logger) (CleanupReport, error) {
	return CleanupReport{}, fmt.Errorf("clean up host network objects on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

func (h *host) Close() {}

func cloexecInherited() error { return nil }
