//go:build !linux

package helper

import (
	"log/slog"

	"brood.dev/brood/helper/spawner"
)

// missingBuildCaps: no Linux capabilities on this system (and no builds: the store is
// Linux's).
func missingBuildCaps(bool) string { return "" }

// imageBuilderFor: the spawner's children (no systemd off Linux).
func imageBuilderFor(sp *spawner.Client, _ *slog.Logger) imageBuilder { return spawnerBuilder{sp} }

// childIdentity: no capabilities or cgroups to describe.
func childIdentity() string { return "" }
