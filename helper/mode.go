package helper

import (
	"runtime"

	"brood.dev/brood/helper/api"
)

// activationCheck is the Doctor check "activation": how this helper got its socket.
// listen is Options.Listen: empty means the service manager passed the socket (systemd's
// broodd-helper.socket on Linux, the launchd job's Sockets entry on macOS); otherwise the
// helper created it itself (the --listen fallback for systems without a service manager
// that activates sockets, and for development). Both are supported: the check never fails.
func activationCheck(listen string) api.Check {
	if listen != "" {
		return api.Check{Name: "activation", OK: true,
			Detail: "--listen " + listen + " (no socket activation: nothing restarts the helper after a crash or reboot)"}
	}
	manager := "systemd broodd-helper.socket"
	if runtime.GOOS == "darwin" {
		manager = "launchd dev.brood.helper"
	}
	return api.Check{Name: "activation", OK: true, Detail: "socket activation (" + manager + ")"}
}
