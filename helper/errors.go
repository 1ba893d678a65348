package helper

import (
	"errors"

	"brood.dev/brood/helper/runner"
	"brood.dev/brood/sandbox/store"
)

// Sentinel errors of package helper, checked with errors.Is. Protocol errors sent to
// clients wrap the typed sentinels of package api (api.ErrPermissionDenied, ...).
var (
	// ErrConfig reports an invalid helper configuration.
	ErrConfig = errors.New("invalid helper configuration")
	// ErrNoActivation reports that no socket was passed by the service manager.
	ErrNoActivation = errors.New("no activated socket")
	// ErrUnsafeDir reports a runtime or state directory that is a symlink, not a
	// directory, not owned by the helper's uid, or writable by group or others.
	ErrUnsafeDir = errors.New("unsafe directory")
	// ErrNoLandlock reports that Landlock cannot confine the helper as the configuration
	// requires (require_landlock = true).
	ErrNoLandlock = errors.New("Landlock confinement unavailable")
	// ErrNoCredentials reports that the peer's credentials could not be read; the
	// connection is closed.
	ErrNoCredentials = errors.New("cannot read peer credentials")
	// ErrIdle reports that the helper stopped after its idle timeout.
	ErrIdle = errors.New("idle timeout")
	// ErrUnsafeArtifact reports a kernel, initramfs or image (or a directory above it)
	// that is a symlink, has the wrong type, is not owned by root, or is writable by
	// group or others: the helper refuses to boot it.
	ErrUnsafeArtifact = store.ErrUnsafe
	// ErrUnknownImage reports an image name with no recipe to build it from.
	ErrUnknownImage = errors.New("no such image recipe")
	// ErrRunner reports a VM runner that failed to start, broke the control protocol or
	// died without reporting how its VM ended (runner.ErrRunner).
	ErrRunner = runner.ErrRunner
)
