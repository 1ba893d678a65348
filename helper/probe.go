package helper

import (
	"context"
	"fmt"
	"os"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/helper/vmhost"
	"brood.dev/brood/internal/version"
	"brood.dev/brood/sandbox"
	"brood.dev/brood/sandbox/qemu"
)

// Version is the helper build version reported by Hello and `--version`
// (internal/version: set with -ldflags -X, else from the binary's build information).
var Version = version.String()

// probeTimeout bounds the VM backend probe (qemu -version, the KVM ioctls).
const probeTimeout = 15 * time.Second

// ProbeHost reports the host facts Hello and Doctor return and what the helper needs to
// run VMs. The accelerator and its reason come from the QEMU backend's probe
// (sandbox/qemu: KVM only when it can really run a stock guest kernel, else TCG with a
// warning). A host without QEMU gets a vmhost.Host with an empty QEMU path: StartVM then
// answers api.ErrUnavailable.
func ProbeHost(cfg *Config, ll api.Landlock) (api.Capabilities, []api.Check, vmhost.Host) {
	caps := api.Capabilities{Version: api.Version, Helper: Version, Accel: sandbox.AccelTCG, Backends: []string{}, Landlock: ll, Policy: "none"}
	var checks []api.Check
	add := func(name string, ok bool, detail string) {
		checks = append(checks, api.Check{Name: name, OK: ok, Detail: detail})
	}
	vmh := vmhost.Host{Accel: sandbox.AccelTCG, KVMGID: spawner.KVMGID()}
	if exe, err := os.Executable(); err == nil {
		vmh.Exe = exe
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	qc, err := probeVMBackend(ctx)
	if err != nil {
		add("backend qemu", false, fmt.Sprintf("%v: install qemu-system-x86", err))
		add("accel", false, "no VM backend")
	} else {
		path, _ := lookQEMU()
		vmh.Backend, vmh.VMM, vmh.Accel, vmh.Warning = &qemu.Backend{Path: path}, path, qc.Accel, qc.Warning
		caps.Backends = append(caps.Backends, qc.Backend)
		caps.Accel = qc.Accel
		add("backend qemu", true, fmt.Sprintf("%s (%s)", path, qc.Version))
		detail := qc.Reason
		if qc.Warning != "" {
			detail = qc.Warning
		}
		// TCG is a supported mode (the only one on hosts whose KVM cannot run a stock
		// kernel): a warning, not a failure.
		checks = append(checks, api.Check{Name: "accel", OK: true, Warn: qc.Accel != sandbox.AccelKVM,
			Detail: fmt.Sprintf("%s: %s", qc.Accel, detail)})
	}
	checks = append(checks, artifactsCheck(cfg))
	if isCharDev("/dev/net/tun") {
		add("tun", true, "/dev/net/tun present")
	} else {
		add("tun", false, "/dev/net/tun missing: egress cannot be set up (modprobe tun)")
	}
	add("landlock", ll.Mode == api.LandlockEnforced, fmt.Sprintf("%s, kernel ABI %d, pinned ABI %d %s", ll.Mode, ll.ABI, ll.PinnedABI, ll.Detail))
	if len(cfg.allowGIDs) == 0 && len(cfg.AllowUIDs) == 0 {
		add("access", false, fmt.Sprintf("group %q does not exist and no allow_uids: only root may use the helper", cfg.AllowGroup))
	} else {
		add("access", true, fmt.Sprintf("group %q (gids %v), uids %v", cfg.AllowGroup, cfg.allowGIDs, cfg.AllowUIDs))
	}
	return caps, checks, vmh
}

func isCharDev(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
