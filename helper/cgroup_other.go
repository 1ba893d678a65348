//go:build !linux

package helper

import (
	"errors"
	"fmt"
	"runtime"

	"brood.dev/brood/helper/api"
)

// userCgroups is unavailable off Linux (cgroups are a Linux mechanism).
type userCgroups struct {
	dir         string
	controllers []string
}

func openUserCgroups(string) (*userCgroups, error) {
	return nil, fmt.Errorf("cgroups on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

func (cg *userCgroups) Place(int, uint32, userQuota) error { return errors.ErrUnsupported }
func (cg *userCgroups) Release(uint32)                     {}
func (cg *userCgroups) RemoveEmpty() int                   { return 0 }

// Check reports that there are no cgroups here.
func (cg *userCgroups) Check(err error) api.Check {
	return api.Check{Name: "user cgroups", OK: true, Warn: true, Detail: err.Error()}
}

// systemdScopes is unavailable off Linux.
type systemdScopes struct{}

func (systemdScopes) Place(int, uint32, userQuota) error { return errors.ErrUnsupported }
func (systemdScopes) Release(uint32)                     {}

// systemdBooted: never off Linux.
func systemdBooted() bool { return false }
