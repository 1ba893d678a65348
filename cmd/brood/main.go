// Command brood is the unprivileged frontend: it snapshots the workspace, asks the helper
// for a microVM, and runs the review gate. All logic lives in package frontend.
//
// Privilege: none. brood runs as the developer; frontend/deps_test.go proves it links no
// helper, nftables, netlink or Landlock code. The one exception today is `sudo brood
// image build`, which writes the root-owned image and kernel caches; moving the builds
// into broodd-helper is planned.
package main

import (
	"os"

	"brood.dev/brood/frontend"
)

func main() { os.Exit(frontend.Main(os.Args[1:])) }
