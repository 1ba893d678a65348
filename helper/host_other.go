//go:build !linux

package helper

import (
	"errors"
	"fmt"
	"runtime"
)

// host is unavailable off Linux: the macOS helper (pf, vmnet) is not written yet.
type host struct {
	links   Links
	fw      Firewall
	runners Runners
}

func openHost() (*host, error) {
	return nil, fmt.Errorf("open host network seams on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

func (h *host) Close() {}

func cloexecInherited() error { return nil }
