// Command brood-guest is PID 1 in brood's microVM (see package guest). Build it static:
// CGO_ENABLED=0 go build -trimpath -ldflags=-s ./cmd/brood-guest
//
// Privilege: root inside the guest only (PID 1 of the microVM); it never runs on the
// host.
package main

import (
	"fmt"
	"os"

	"brood.dev/brood/sandbox/guest"
)

func main() {
	if err := guest.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "brood-guest:", err)
		os.Exit(1)
	}
}
