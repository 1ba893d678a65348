// Command packaging builds brood's OS packages: a .deb and an .rpm per architecture
// (amd64, arm64) with github.com/goreleaser/nfpm/v2 used as a library, no hand-made
// archives. Run it from the repository root (scripts/package.sh does):
//
//	go run ./packaging -out dist -arch amd64,arm64
//
// For each architecture it builds brood, broodd-helper and the static brood-guest with the
// version from `git describe` linked in (internal/version), generates man pages and shell
// completions from the cobra command tree, and writes
// dist/brood_<version>_<arch>.deb and dist/brood-<version>-1.<arch>.rpm. The package
// layout, the maintainer scripts and the config files are described in docs/packaging.md.
//
// Privilege: none. It runs the Go toolchain and git and writes only below -out and a
// temporary directory.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	var o options
	arches := flag.String("arch", "amd64,arm64", "comma-separated GOARCH `list` (amd64, arm64)")
	formats := flag.String("format", "deb,rpm", "comma-separated package `formats` (deb, rpm)")
	flag.StringVar(&o.Root, "root", ".", "repository root `dir`")
	flag.StringVar(&o.Out, "out", "dist", "output `dir`")
	flag.StringVar(&o.Describe, "describe", "", "version as `git describe` prints it (default: run git describe)")
	flag.Parse()
	o.Arches = strings.Split(*arches, ",")
	o.Formats = strings.Split(*formats, ",")
	paths, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "packaging:", err)
		os.Exit(1)
	}
	for _, p := range paths {
		fmt.Println(p)
	}
}
