// Command brood is the unprivileged frontend: it snapshots the workspace, asks the helper
// for a microVM, and runs the review gate. All logic lives in package frontend.
package main

import (
	"os"

	"brood.dev/brood/frontend"
)

func main() { os.Exit(frontend.Main(os.Args[1:])) }
