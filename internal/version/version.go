// Package version is the build version of brood's binaries, one value shared by brood
// (`brood --version`, `brood doctor`) and broodd-helper (`--version`, the Hello answer).
//
// Packages set it at link time from `git describe` (scripts/package.sh):
//
//	go build -ldflags "-X brood.dev/brood/internal/version.Version=v0.3.0-12-gabc1234" ./cmd/brood
//
// A plain `go build` leaves it empty; String then falls back to the module version or
// the VCS revision the Go toolchain records in the binary (runtime/debug.ReadBuildInfo).
//
// Privilege: none. Linked into brood and broodd-helper; it reads only the running
// binary's build information.
package version

import "runtime/debug"

// Version is set with -ldflags -X (see the package doc); empty in a plain build.
var Version string

// String returns the build version: Version when set, else the fallback from the binary's
// build information (fromBuildInfo), else "dev".
func String() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return fromBuildInfo(bi)
}

// revisionLen is how many hex digits of the VCS revision the fallback shows (as
// `git describe` abbreviates, 12 for this repository's size).
const revisionLen = 12

// fromBuildInfo derives a version from build information: the main module's version when
// it is a real one (a `go install brood.dev/brood/cmd/brood@v1.2.3` build), else
// "dev+<revision>" with "-dirty" for a modified tree (settings vcs.revision and
// vcs.modified), else "dev".
func fromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > revisionLen {
		rev = rev[:revisionLen]
	}
	v := "dev+" + rev
	if modified == "true" {
		v += "-dirty"
	}
	return v
}
