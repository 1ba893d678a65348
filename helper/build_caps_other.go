//go:build !linux

package helper

// missingBuildCaps: no Linux capabilities on this system (and no builds: the store is
// Linux's).
func missingBuildCaps(bool) string { return "" }
