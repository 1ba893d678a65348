//go:build !linux

package helper

import (
	"context"
	"fmt"
	"os"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox"
	"brood.dev/brood/sandbox/store"
)

// VMs run only on Linux for now (the krun backend for macOS is not written yet): these
// stubs keep the helper building elsewhere and answer api.ErrUnavailable.

// builtImages: no VMs, so no bootable image (nil: "cannot tell").
func builtImages(*Config) []string { return nil }

var errNoVMs = fmt.Errorf("VMs are not supported on this OS: %w", api.ErrUnavailable)

func probeVMBackend(context.Context) (sandbox.Capabilities, error) {
	return sandbox.Capabilities{}, fmt.Errorf("no VM backend on this OS: %w", sandbox.ErrUnavailable)
}

func lookQEMU() (string, error) { return "", errNoVMs }

func artifactsCheck(*Config) api.Check {
	return api.Check{Name: "guest artifacts", Detail: "VMs are not supported on this OS"}
}

// ExecOnlyCopy is not needed on this OS.
func ExecOnlyCopy(src, _ string) (string, error) { return src, nil }

// SelfCopyPath: runners are not started on this OS; the helper runs its own executable.
func SelfCopyPath(_, exe string) string { return exe }

// SelfCopy is not needed on this OS: it returns the helper's own executable.
func SelfCopy(string) (string, error) { return os.Executable() }

const vmmDir = "vmm"

// listImages: no VMs, so no image is bootable.
func listImages(*Config) ([]api.Image, error) { return []api.Image{}, nil }

func openArtifacts(*Config, string) (*artifacts, error) { return nil, errNoVMs }

type artifacts struct{ Image *os.File }

func (*artifacts) Close() {}

func storeOf(cfg *Config) store.Layout { return store.New(cfg.StateDir) }
