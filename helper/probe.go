package helper

import (
	"fmt"
	"os"
	"os/exec"

	"brood.dev/brood/helper/api"
)

// Version is the helper build version reported by Hello (set with -ldflags -X).
var Version = "dev"

// ProbeHost reports the host facts Hello and Doctor return. It runs before confinement.
// Backend detection is a placeholder until package sandbox's Backend.Probe is wired in:
// "qemu" when qemu-system-x86_64 or qemu-system-aarch64 is on PATH.
func ProbeHost(cfg *Config, ll api.Landlock) (api.Capabilities, []api.Check) {
	caps := api.Capabilities{Version: api.Version, Helper: Version, Accel: "tcg", Backends: []string{}, Landlock: ll, Policy: "none"}
	var checks []api.Check
	add := func(name string, ok bool, detail string) {
		checks = append(checks, api.Check{Name: name, OK: ok, Detail: detail})
	}
	if isCharDev("/dev/kvm") {
		caps.Accel = "kvm"
		add("kvm", true, "/dev/kvm present")
	} else {
		add("kvm", false, "/dev/kvm missing: VMs run under TCG emulation (slow)")
	}
	for _, q := range []string{"qemu-system-x86_64", "qemu-system-aarch64"} {
		if p, err := exec.LookPath(q); err == nil {
			caps.Backends = append(caps.Backends, "qemu")
			add("backend qemu", true, p)
			break
		}
	}
	if len(caps.Backends) == 0 {
		add("backend qemu", false, "qemu-system-* not found on PATH: install qemu-system-x86")
	}
	if isCharDev("/dev/net/tun") {
		add("tun", true, "/dev/net/tun present")
	} else {
		add("tun", false, "/dev/net/tun missing: egress cannot be set up (modprobe tun)")
	}
	add("landlock", ll.Mode == "enforced", fmt.Sprintf("%s, kernel ABI %d, pinned ABI %d %s", ll.Mode, ll.ABI, ll.PinnedABI, ll.Detail))
	if len(cfg.allowGIDs) == 0 && len(cfg.AllowUIDs) == 0 {
		add("access", false, fmt.Sprintf("group %q does not exist and no allow_uids: only root may use the helper", cfg.AllowGroup))
	} else {
		add("access", true, fmt.Sprintf("group %q (gids %v), uids %v", cfg.AllowGroup, cfg.allowGIDs, cfg.AllowUIDs))
	}
	return caps, checks
}

func isCharDev(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
