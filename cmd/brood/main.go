// Command brood is the unprivileged frontend: it snapshots the workspace, asks the helper
// for a microVM, and runs the review gate. All logic lives in package
// frontend/cli (the commands) and package frontend (the session workflow).
//
// Privilege: none. brood runs as the developer; frontend/deps_test.go proves it links no
// helper, nftables, netlink or Landlock code, and none of the artifact builders (images
// and kernels are built by `sudo broodd-helper image build NAME`).
package main

import (
	"os"

	"brood.dev/brood/frontend/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
