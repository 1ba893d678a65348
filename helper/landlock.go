package helper

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress"
	"brood.dev/brood/helper/landlockabi"
	"brood.dev/brood/netpolicy/namegate"
)

// PinnedABI is the Landlock ABI the helper's ruleset is written and tested for
// (landlockabi.Pinned, shared with the VM runner).
const PinnedABI = landlockabi.Pinned

// landlockABI reports the kernel's Landlock ABI (a variable so tests can simulate old
// kernels).
var landlockABI = landlockabi.Kernel

// systemRODirs are the system paths the helper may read and execute after confinement:
// binaries and libraries (runner re-exec, qemu), /etc for resolv.conf and NSS, /proc and
// /sys for process and device probes. Missing ones are skipped.
var systemRODirs = []string{"/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/sys"}

// deviceFiles are the devices the helper opens read-write after confinement, with device
// ioctls (TUNSETIFF on the tap, KVM ioctls are the runner's). /dev/null is needed by
// os/exec for nil stdio (without it exec fails: "open /dev/null: permission denied").
var deviceFiles = []string{"/dev/null", "/dev/net/tun", "/dev/kvm"}

// ConfinementRules builds the helper's Landlock ruleset: read-only system paths,
// read-write runtime and state directories, a few devices. With the ABI 7 config every
// classic TCP bind and connect is denied except the egress ports below (otherwise the
// helper uses only Unix and netlink sockets). Caveat: MPTCP sockets bypass
// Landlock TCP rules (the helper opens none) and UDP is not restrictable before ABI 10.
//
// Egress (package egress) adds: reading the system policy file's directory, binding TCP
// DNSPort (each session's DNS proxy) and TCP port 0 (each session's name gate listens at
// a port the kernel picks from the ephemeral range, ip_local_port_range, so it never
// collides with a host service; a rule for port 0 grants that and no fixed port),
// connecting to TCP 443 and 80 (the egress processes inherit this domain, and their
// name gates dial admitted destinations on those ports), connecting to the upstream resolver's TCP port
// (answers truncated over UDP), and writing files under /proc/sys/net/ipv6/conf (IPv6
// force_forwarding of taps, see IPv6Conf). The proxies' UDP sockets are not restricted at
// ABI 7; per-interface IPv4 forwarding is set over rtnetlink, not procfs.
func ConfinementRules(cfg *Config) []landlock.Rule {
	rules := []landlock.Rule{
		landlock.RODirs(systemRODirs...).IgnoreIfMissing(),
		landlock.RWDirs(cfg.RuntimeDir, cfg.StateDir).WithRefer(),
		landlock.RWFiles(deviceFiles...).WithIoctlDev().IgnoreIfMissing(),
		landlock.BindTCP(egress.DNSPort),
		landlock.BindTCP(0), // the name gate's listeners (egress.bindGate)
		// The egress processes start inside this domain and Landlock domains nest: their
		// name gates' connections to admitted destinations need these ports here too.
		landlock.ConnectTCP(namegate.PortTLS),
		landlock.ConnectTCP(namegate.PortHTTP),
		landlock.ConnectTCP(egress.UpstreamTCPPort(cfg.Egress.Upstream)),
		// Per-interface IPv6 forwarding of taps created later: IPv6Conf holds this
		// directory open from before confinement, which keeps the rule's inode in use.
		landlock.PathAccess(llsys.AccessFSWriteFile, egress.IPv6ConfDir).IgnoreIfMissing(),
	}
	if cfg.cgroupDir != "" {
		// The per-uid cgroups of runners (cgroup_linux.go): create, limit, fill, remove.
		rules = append(rules, landlock.RWDirs(cfg.cgroupDir))
	}
	if cfg.Egress.PolicyPath != "" {
		// netpolicy.LoadSystemPolicy opens the directory too (its owner and mode are checked).
		rules = append(rules, landlock.RODirs(filepath.Dir(cfg.Egress.PolicyPath)).IgnoreIfMissing())
	}
	return rules
}

// Confine restricts the helper (all its threads, irreversibly) with ConfinementRules.
//
//   - Kernel ABI >= PinnedABI: the pinned ruleset is enforced; any error is returned.
//   - Older kernel or no Landlock: with cfg.RequireLandlock the helper refuses
//     (ErrNoLandlock); otherwise it enforces what the kernel supports (best effort) and
//     reports the explicit, logged mode "degraded".
//
// When NOTIFY_SOCKET names an abstract socket (systemd may use one), the abstract-socket
// scope is left out so that sd_notify keeps working; this is logged.
func Confine(cfg *Config, log *slog.Logger) (api.Landlock, error) {
	abi, err := landlockABI()
	if err != nil {
		abi = 0
	}
	st := api.Landlock{ABI: abi, PinnedABI: PinnedABI}
	llcfg := landlockabi.Config
	if strings.HasPrefix(os.Getenv("NOTIFY_SOCKET"), "@") {
		llcfg.Scoped &^= llsys.ScopeAbstractUnixSocket
		log.Warn("landlock: abstract NOTIFY_SOCKET, abstract unix socket scope not restricted")
	}
	rules := ConfinementRules(cfg)
	// The helper re-executes itself as the VM runner (`vm-run`); its binary may live
	// outside the system directories (development builds, tests).
	if exe, err := os.Executable(); err == nil {
		rules = append(rules, landlock.ROFiles(exe))
	}
	if abi >= PinnedABI {
		if err := llcfg.Restrict(rules...); err != nil {
			return st, fmt.Errorf("landlock restrict (ABI %d): %w", PinnedABI, err)
		}
		st.Enforced, st.Mode = true, api.LandlockEnforced
		return st, nil
	}
	detail := fmt.Sprintf("kernel Landlock ABI %d is below the pinned ABI %d", abi, PinnedABI)
	if abi == 0 {
		detail = fmt.Sprintf("Landlock unavailable: %v", err)
	}
	if cfg.RequireLandlock {
		return st, fmt.Errorf("%w: %s and require_landlock is set", ErrNoLandlock, detail)
	}
	if abi > 0 {
		if err := llcfg.BestEffort().Restrict(rules...); err != nil {
			return st, fmt.Errorf("landlock restrict (best effort, ABI %d): %w", abi, err)
		}
		st.Enforced = true
	}
	st.Mode, st.Detail = api.LandlockDegraded, detail
	log.Warn("landlock: DEGRADED confinement", "detail", detail, "enforced", st.Enforced)
	return st, nil
}
