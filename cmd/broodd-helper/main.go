// Command broodd-helper is brood's privileged helper: socket-activated, peer-credential
// checked, Landlock-confined. `broodd-helper image build NAME` (as root) fills the
// artifact store the helper boots from. All logic lives in package helper and its
// subpackages (docs/helper-processes.md).
//
// Privilege: root. The same binary re-executes itself as the runner spawner (`vm-spawn`,
// package helper/spawner: root, unconfined) and the VM runner (`vm-run`, package
// helper/runner: the session owner's uid, no_new_privs, Landlock).
package main

import (
	"os"

	"brood.dev/brood/helper"
)

func main() { os.Exit(helper.Main(os.Args[1:])) }
