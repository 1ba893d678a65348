//go:build !linux

package helper

import (
	"log/slog"

	"brood.dev/brood/helper/api"
)

// dropCapabilities does nothing off Linux: capabilities are a Linux mechanism.
func dropCapabilities(*slog.Logger) error { return nil }

// capabilitiesCheck reports that capabilities do not exist on this system.
func capabilitiesCheck() api.Check {
	return api.Check{Name: "capabilities", OK: true, Detail: "no Linux capabilities on this system"}
}
