// Package guest is brood-guest, PID 1 of the microVM (cmd/brood-guest is its thin main,
// built static with CGO_ENABLED=0 and packed into the initramfs as /init).
//
// Boot sequence (Run):
//  1. mount /proc, /sys, /dev (devtmpfs: the kernel has no DEVTMPFS_MOUNT) in the initramfs;
//  2. set the clock from brood.time on the kernel command line;
//  3. start loading the kernel modules listed in guestcfg.ModulesLoadPath (finit_module,
//     concurrently where modules.dep and modules.softdep allow); each later step waits
//     only for its own modules, so with several vCPUs the loads overlap the steps;
//  4. read the session config (guestcfg.SessionPath) and delete it; start virtio_net
//     when the session has a network;
//  5. once the virtio-serial modules are in, open the SSH port; its handshake runs
//     from then on, beside steps 6-7 (step 8);
//  6. once virtio_blk, erofs and overlay are in, mount the rootfs disk /dev/vda
//     read-only under a tmpfs overlay (writes outside /workspace live in RAM and die
//     with the VM); once 9p is in, the share at /workspace; then /tmp, /dev/pts,
//     /dev/shm; then switch root into it and mount the agent's home: a tmpfs owned by
//     the session's uid, mode 0700, seeded from the image's home or /etc/skel;
//  7. configure lo, and eth0 only when the config has a network;
//  8. serve SSH on the virtio-serial port guestcfg/sandbox call "brood.ssh": one
//     connection, authenticated by the session's client key only, each session channel
//     running its command as the unprivileged agent user in /workspace once steps 6-7
//     are done;
//  9. when that connection ends: kill what is left, sync, power off.
//
// Any failure logs to the console and powers off: PID 1 never exits (that would panic
// the kernel).
//
// Privilege: root inside the guest only; it never runs on the host.
package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/sandbox/guestcfg"
)

// sshPortName must match sandbox.SSHPortName (guest code does not import the host side).
const sshPortName = "brood.ssh"

// shareTag must match sandbox.ShareTag.
const shareTag = "workspace"

// Workspace is where the share is mounted in the guest.
const Workspace = "/workspace"

// Run is brood-guest's main. It returns only on failure before anything was mounted
// when not PID 1; as PID 1 it ends by powering off.
func Run() error {
	if os.Getpid() != 1 {
		return ErrNotPID1
	}
	g := &guest{}
	err := g.boot()
	if err != nil {
		g.logf("FATAL: %v", err)
	}
	g.shutdown()
	return err // not reached: shutdown powers off
}

type guest struct {
	debug   bool
	cfg     guestcfg.Config
	reaper  *reaper
	cmdline map[string]string
	mods    *modLoader
	ready   chan struct{} // closed once root, reaper and network are set up
	home    string        // the agent's home; "" is homeDir(cfg) (tests set another)
	// agentDir is where forwarded agent sockets are made; "" is agentRunDir (tests set another).
	agentDir string
}

// logf writes one line to the console (fd 2 is /dev/console for init), stamped with
// the time since boot (CLOCK_BOOTTIME, the kernel log's clock) like the kernel's lines.
func (g *guest) logf(format string, a ...any) {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	fmt.Fprintf(os.Stderr, "[%5d.%06d] brood-guest: %s\n", ts.Sec, ts.Nsec/1000, fmt.Sprintf(format, a...))
}

func (g *guest) debugf(format string, a ...any) {
	if g.debug {
		g.logf(format, a...)
	}
}

// boot runs the guest's init sequence, numbered below, and then serves SSH until the
// session ends. It returns the first step's error (the caller logs it and powers off)
// or serveSSH's result. A clock that cannot be set is logged and is not fatal.
func (g *guest) boot() error {
	// 1. Kernel filesystems in the initramfs, and the kernel command line.
	if err := g.mountKernelFS(); err != nil {
		return err
	}
	g.debugf("started")

	// 2. Clock.
	if v, ok := g.cmdline[guestcfg.CmdlineTime]; ok {
		if err := setClock(v); err != nil {
			g.logf("set clock: %v", err) // a wrong clock is not fatal
		}
	}

	// 3. Modules: all that the list names, except the optional ones.
	if err := g.startModules(); err != nil {
		return err
	}

	// 4. Session config, then remove it from the initramfs; virtio_net if it has a network.
	if err := g.readSessionConfig(); err != nil {
		return err
	}

	// 5. The SSH port: its handshake runs while the root is mounted.
	if err := g.mods.wait(sshModules); err != nil {
		return err
	}
	g.debugf("ssh modules loaded")
	port, err := openPort()
	if err != nil {
		return err
	}
	sshDone := make(chan error, 1)
	g.ready = make(chan struct{})
	go func() { sshDone <- g.serveSSH(port) }()

	// 6. Root filesystem and switch root.
	if err := g.mountRoot(); err != nil {
		return err
	}
	g.debugf("root mounted")
	g.reaper = newReaper()

	// 7. Network.
	if g.cfg.Net != nil {
		if err := g.mods.wait([]string{netModule}); err != nil {
			return err
		}
	}
	if err := configureNet(g.cfg.Net); err != nil {
		return err
	}
	_ = unix.Sethostname([]byte("brood"))
	g.debugf("network configured")
	close(g.ready) // sessions may run commands now

	// 8. SSH until the session ends (9. is shutdown, in Run).
	return <-sshDone
}

// mountKernelFS mounts proc, sysfs and devtmpfs (nosuid, noexec) in the initramfs, then
// reads /proc/cmdline into g.cmdline and turns on debug logging when the command line
// has guestcfg.CmdlineDebug=1. A devtmpfs that does not mount is ignored; proc or
// sysfs failing is an error, and so is an unreadable command line.
func (g *guest) mountKernelFS() error {
	for _, m := range []struct{ src, dst, typ string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
	} {
		if err := mount(m.src, m.dst, m.typ, unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil && m.typ != "devtmpfs" {
			return err
		}
	}
	cl, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return fmt.Errorf("read kernel cmdline: %w", err)
	}
	g.cmdline = parseCmdline(string(cl))
	g.debug = g.cmdline[guestcfg.CmdlineDebug] == "1"
	return nil
}

// readSessionConfig reads the session config from the initramfs
// (/guestcfg.SessionPath) into g.cfg and removes the file, so nothing in the VM can read
// it later; for a session with a network it starts loading the NIC driver. It returns
// the error of reading or decoding the config, or of starting the module load.
func (g *guest) readSessionConfig() error {
	b, err := os.ReadFile("/" + guestcfg.SessionPath)
	if err != nil {
		return fmt.Errorf("read session config: %w", err)
	}
	os.Remove("/" + guestcfg.SessionPath)
	if g.cfg, err = guestcfg.Unmarshal(b); err != nil {
		return err
	}
	g.debugf("session config read")
	if g.cfg.Net != nil {
		if err := g.mods.start([]string{netModule}); err != nil {
			return err
		}
	}
	return nil
}

// parseCmdline splits /proc/cmdline into key=value words (bare words map to "").
func parseCmdline(s string) map[string]string {
	m := map[string]string{}
	for _, w := range strings.Fields(s) {
		k, v, _ := strings.Cut(w, "=")
		m[k] = v
	}
	return m
}

// setClock sets the wall clock from "SECONDS.NANOSECONDS" (the host clock when QEMU
// started) plus the time since boot.
func setClock(v string) error {
	secs, nsecs, _ := strings.Cut(v, ".")
	s, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return fmt.Errorf("parse %s=%q: %w", guestcfg.CmdlineTime, v, err)
	}
	var ns int64
	if nsecs != "" {
		if ns, err = strconv.ParseInt(nsecs, 10, 64); err != nil {
			return fmt.Errorf("parse %s=%q: %w", guestcfg.CmdlineTime, v, err)
		}
	}
	// brood.time is when the VMM started; the kernel has been up since about then.
	var up unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &up)
	tv := unix.NsecToTimeval(s*1e9 + ns + up.Nano())
	return os.NewSyscallError("settimeofday", unix.Settimeofday(&tv))
}

// Modules each boot step waits for (a module built into the kernel is skipped): the
// SSH channel's (virtio-mmio transport, the virtio-serial port, entropy for the
// handshake), the root disk's (virtio_blk, erofs, overlay), the share's and the NIC's.
// They must be in DefaultModules of package initramfs.
var (
	sshModules   = []string{"virtio_mmio", "virtio_console", "virtio_rng"}
	rootModules  = []string{"virtio_blk", "erofs", "overlay"}
	shareModules = []string{"9pnet_virtio", "9p"}
)

// netModule is the NIC driver, loaded only for a session with a network.
const netModule = "virtio_net"

// startModules starts loading the modules of guestcfg.ModulesLoadPath, skipping the
// optional ones (guestcfg.OptionalModules), which a step starts when it needs them.
func (g *guest) startModules() error {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return os.NewSyscallError("uname", err)
	}
	rel := unix.ByteSliceToString(uts.Release[:])
	l, err := newModLoader(filepath.Join("/lib/modules", rel))
	if err != nil {
		return err
	}
	if g.debug {
		l.logf = g.logf
	}
	g.mods = l
	list, err := os.ReadFile("/" + guestcfg.ModulesLoadPath)
	if err != nil {
		return fmt.Errorf("read module list: %w", err)
	}
	var names []string
	for _, name := range strings.Fields(string(list)) {
		if !guestcfg.OptionalModules[name] {
			names = append(names, name)
		}
	}
	return l.start(names)
}

// mount is unix.Mount with the directory created and an error naming both.
func mount(src, dst, typ string, flags uintptr, data string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("mount %s: %w", dst, err)
	}
	if err := unix.Mount(src, dst, typ, flags, data); err != nil {
		return fmt.Errorf("mount %s (%s) on %s: %w", src, typ, dst, err)
	}
	return nil
}

// waitFor polls until path exists or d passes (device nodes appear asynchronously).
func waitFor(path string, d time.Duration) bool {
	for end := time.Now().Add(d); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// mountRoot builds the agent's root: rootfs read-only + tmpfs upper as an overlay at
// /newroot, the share at /newroot/workspace, kernel filesystems moved in; then
// switches root to it, names the session's uid in /etc/passwd (setUser; a failure is
// logged, not fatal) and mounts the agent's home (makeHome). It returns
// the first error of a module wait, a mount or the switch (ErrNoRootfs when no root
// disk appears).
func (g *guest) mountRoot() error {
	const nr = "/newroot"
	if err := g.mods.wait(rootModules); err != nil {
		return err
	}
	if err := mountOverlay(nr); err != nil {
		return err
	}
	if err := g.mountShare(nr); err != nil {
		return err
	}
	// Module files are opened by path in the initramfs, which the switch root hides.
	if err := g.mods.waitAll(); err != nil {
		return err
	}
	g.debugf("modules loaded")
	if err := mountSystem(nr); err != nil {
		return err
	}
	if err := switchRoot(nr); err != nil {
		return err
	}
	home := homeDir(g.cfg)
	if err := setUser("/etc", g.cfg.User, g.cfg.UID, g.cfg.GID, home); err != nil {
		g.logf("%v (the agent runs without an account entry)", err) // an image without /etc
	}
	return makeHome(home, g.cfg.UID, g.cfg.GID, skelDirs(home))
}

// mountOverlay mounts the root disk /dev/vda (erofs, read-only) at /lower and a tmpfs
// at /rw, then an overlay of the two at nr, so the agent's writes go to memory. It
// waits up to 5 s for /dev/vda (ErrNoRootfs if it does not appear) and returns the
// first mount or mkdir error.
func mountOverlay(nr string) error {
	if !waitFor("/dev/vda", 5*time.Second) {
		return ErrNoRootfs
	}
	if err := mount("/dev/vda", "/lower", "erofs", unix.MS_RDONLY, ""); err != nil {
		return err
	}
	if err := mount("tmpfs", "/rw", "tmpfs", 0, "mode=0755"); err != nil {
		return err
	}
	for _, d := range []string{"/rw/upper", "/rw/work"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("create overlay dir: %w", err)
		}
	}
	return mount("overlay", nr, "overlay", 0, "lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work")
}

// mountShare waits for the 9p modules, then mounts the workspace share (virtio-9p tag
// shareTag; nosuid, nodev, uncached, permissions checked per user) at nr+Workspace, or
// creates an empty directory there when the VM has no share. It returns the module
// wait's, the mount's or the mkdir's error.
func (g *guest) mountShare(nr string) error {
	if err := g.mods.wait(shareModules); err != nil {
		return err
	}
	if hasShare() {
		return mount(shareTag, nr+Workspace, "9p", unix.MS_NOSUID|unix.MS_NODEV,
			"trans=virtio,version=9p2000.L,msize=512000,cache=none,access=user")
	}
	if err := os.MkdirAll(nr+Workspace, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", Workspace, err)
	}
	return nil
}

// mountSystem moves the initramfs's /proc, /sys and /dev under nr, mounts /tmp,
// /dev/pts (a new devpts instance, group tty = 5), /dev/shm and /run in it, and points
// /dev/ptmx at the new devpts's ptmx. It returns the first mkdir, mount or symlink error.
func mountSystem(nr string) error {
	for _, d := range []string{"/proc", "/sys", "/dev"} {
		if err := os.MkdirAll(nr+d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", nr+d, err)
		}
		if err := unix.Mount(d, nr+d, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move mount %s: %w", d, err)
		}
	}
	for _, m := range []struct {
		src, dst, typ string
		flags         uintptr
		data          string
	}{
		{"tmpfs", nr + "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"devpts", nr + "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5"},
		{"tmpfs", nr + "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"tmpfs", nr + "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
	} {
		if err := mount(m.src, m.dst, m.typ, m.flags, m.data); err != nil {
			return err
		}
	}
	// /dev/ptmx must reach the devpts instance above.
	os.Remove(nr + "/dev/ptmx")
	if err := os.Symlink("pts/ptmx", nr+"/dev/ptmx"); err != nil {
		return fmt.Errorf("link /dev/ptmx: %w", err)
	}
	return nil
}

// switchRoot makes nr the root, as switch_root(8) does: chdir into it, move it onto /,
// chroot to it. The initramfs stays behind, unreachable. It returns the failing
// syscall's error.
func switchRoot(nr string) error {
	if err := unix.Chdir(nr); err != nil {
		return os.NewSyscallError("chdir", err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move %s to /: %w", nr, err)
	}
	if err := unix.Chroot("."); err != nil {
		return os.NewSyscallError("chroot", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return os.NewSyscallError("chdir", err)
	}
	return nil
}

// hasShare reports whether a virtio-9p device with the workspace tag exists.
func hasShare() bool {
	tags, _ := filepath.Glob("/sys/bus/virtio/drivers/9pnet_virtio/virtio*/mount_tag")
	for _, t := range tags {
		if b, err := os.ReadFile(t); err == nil && strings.TrimRight(string(b), "\x00\n") == shareTag {
			return true
		}
	}
	return false
}

// homeDir is the agent's home, /home/USER.
func homeDir(c guestcfg.Config) string { return "/home/" + c.User }

// shutdown ends the VM: TERM, up to 50 ms for everything else to exit, then KILL,
// sync, power off. Under
// microvm the power-off goes through the ACPI GED and, with -no-reboot, QEMU exits 0.
func (g *guest) shutdown() {
	_ = unix.Kill(-1, unix.SIGTERM)
	waitNoChildren(50 * time.Millisecond)
	_ = unix.Kill(-1, unix.SIGKILL)
	unix.Sync()
	g.debugf("power off")
	for {
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
		time.Sleep(time.Second)
	}
}

// waitNoChildren returns once PID 1 has no children left (every process in the VM
// descends from it, orphans are re-parented to it) or d has passed. It reaps the
// zombies it finds; the reaper may reap some too.
func waitNoChildren(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		pid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
		switch {
		case err == unix.ECHILD:
			return
		case err == nil && pid > 0:
			continue // reaped one; look again at once
		}
		time.Sleep(time.Millisecond)
	}
}
