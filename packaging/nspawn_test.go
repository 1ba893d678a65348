package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy/dnsproxy"
)

// cacheDir holds what TestInstalledUnderSystemd builds once and reuses: the container's
// root file system and the helper's artifact store (kernel, initramfs, test image).
const cacheDir = "/var/cache/brood-test"

// rootfsArgs make the container's Debian bookworm root: systemd as PID 1 and the .deb's
// dependencies preinstalled, because the container has no network (--private-network)
// and apt installs the .deb offline.
var rootfsArgs = []string{"--variant=minbase",
	"--include=dbus,erofs-utils,iproute2,kmod,nftables,qemu-system-x86,systemd,systemd-sysv,xz-utils", "bookworm"}

// cachedRootfs returns the rootfs tarball, made with mmdebstrap on first use (a few
// minutes; about 250 MB) under cacheDir, named by a hash of rootfsArgs.
func cachedRootfs(t *testing.T) string {
	t.Helper()
	mmdebstrap := testenv.RequireCommand(t, "mmdebstrap")
	sum := sha256.Sum256([]byte(strings.Join(rootfsArgs, "\x00")))
	tarball := filepath.Join(cacheDir, "nspawn", "bookworm-"+hex.EncodeToString(sum[:6])+".tar")
	if _, err := os.Stat(tarball); err == nil {
		return tarball
	}
	if err := os.MkdirAll(filepath.Dir(tarball), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := tarball + ".tmp"
	if out, err := exec.Command(mmdebstrap, append(rootfsArgs, tmp)...).CombinedOutput(); err != nil {
		t.Fatalf("mmdebstrap: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, tarball); err != nil {
		t.Fatal(err)
	}
	return tarball
}

// container is a booted systemd-nspawn container.
type container struct {
	t    *testing.T
	root string
	pid  int // the container's PID 1 (systemd), as seen from the host
}

// bootContainer boots root with systemd-nspawn in its own network namespace, with
// /dev/net/tun (and /dev/kvm when present) bound in, and waits until systemd reports the
// system running. The container is powered off at cleanup.
func bootContainer(t *testing.T, root string) *container {
	t.Helper()
	nspawn := testenv.RequireCommand(t, "systemd-nspawn")
	testenv.RequireCommand(t, "nsenter")
	args := []string{"-D", root, "-b", "--register=no", "--keep-unit", "--private-network",
		"--console=read-only", "--bind=/dev/net/tun", "--machine=brood-test-" + strconv.Itoa(os.Getpid()),
		// nspawn's seccomp allow-list (systemd 252) predates Landlock: without these the
		// helper finds no Landlock and runs degraded, which doctor reports as a failure.
		"--system-call-filter=landlock_create_ruleset landlock_add_rule landlock_restrict_self"}
	if _, err := os.Stat("/dev/kvm"); err == nil {
		args = append(args, "--bind=/dev/kvm")
	}
	cmd := exec.Command(nspawn, args...)
	logf, err := os.Create(filepath.Join(t.TempDir(), "console.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("systemd-nspawn: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt) // SIGINT: nspawn asks the container's systemd to power off
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(90 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			if log, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("container console (tail):\n%s", tail(string(log), 4000))
			}
		}
	})
	c := &container{t: t, root: root, pid: childPID(t, cmd.Process.Pid)}
	t.Cleanup(func() { // before the power-off above: the helper's log explains a failure
		if t.Failed() {
			out, _ := c.exec("", "journalctl", "--no-pager", "-o", "cat", "-n", "150", "-u", "broodd-helper.service", "-u", "broodd-helper.socket")
			t.Logf("helper journal:\n%s", out)
		}
	})
	// systemctl needs systemd's private socket, which PID 1 makes early in its start-up.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if _, err := c.exec("", "test", "-S", "/run/systemd/private"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the container's systemd made no /run/systemd/private within 2 minutes")
		}
	}
	// --wait blocks until start-up is finished; "degraded" (a unit failed) is reported.
	out, _ := c.exec("", "systemctl", "is-system-running", "--wait")
	if state := strings.TrimSpace(out); state != "running" {
		failed, _ := c.exec("", "systemctl", "--failed", "--no-pager")
		t.Fatalf("container systemd state %q, want running:\n%s", state, failed)
	}
	return c
}

// childPID waits (up to a minute) for the first child of nspawn: the container's PID 1.
func childPID(t *testing.T, parent int) int {
	t.Helper()
	p := fmt.Sprintf("/proc/%d/task/%d/children", parent, parent)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("systemd-nspawn exited: %v", err)
		}
		if f := strings.Fields(string(data)); len(f) > 0 {
			pid, _ := strconv.Atoi(f[0])
			// The child execs systemd after nspawn's own setup: wait for that.
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "systemd" {
				return pid
			}
		}
	}
	t.Fatal("systemd-nspawn started no systemd within a minute")
	return 0
}

// containerPath is PATH inside the container.
const containerPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// exec runs argv in all of the container's namespaces, as root (user "") or as user
// (setpriv with the user's groups, a clean environment and HOME), and returns its combined
// output and error.
func (c *container) exec(user string, argv ...string) (string, error) {
	args := []string{"-t", strconv.Itoa(c.pid), "-a"}
	if user != "" {
		args = append(args, "setpriv", "--reuid="+user, "--regid="+user, "--init-groups",
			"env", "-i", containerPath, "HOME=/home/"+user, "USER="+user, "LOGNAME="+user, "LANG=C.UTF-8")
	} else {
		args = append(args, "env", "-i", containerPath, "DEBIAN_FRONTEND=noninteractive", "LANG=C.UTF-8")
	}
	out, err := exec.Command("nsenter", append(args, argv...)...).CombinedOutput()
	return string(out), err
}

// must is exec that fails the test on an error.
func (c *container) must(user string, argv ...string) string {
	c.t.Helper()
	out, err := c.exec(user, argv...)
	if err != nil {
		c.t.Fatalf("in the container%s: %s: %v\n%s", map[bool]string{true: " as " + user}[user != ""], strings.Join(argv, " "), err, out)
	}
	return out
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// cachedStore builds the helper's artifact store (guest kernel, base initramfs with the
// packaged brood-guest, the test image) with the packaged broodd-helper under cacheDir, and
// copies it to dst. The container has no network, so `broodd-helper image build test`
// (what the postinst tells the administrator to run) runs on the host, with the same
// binaries; the kernel and image are cached across runs, the initramfs follows the guest
// binary.
func cachedStore(t *testing.T, unpacked, dst string) {
	t.Helper()
	store := filepath.Join(cacheDir, "store")
	build := exec.Command(filepath.Join(unpacked, "usr/sbin/broodd-helper"), "image", "build", "--state-dir", store, "test")
	build.Env = append(os.Environ(), "BROOD_GUEST="+filepath.Join(unpacked, "usr/libexec/brood/brood-guest"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("broodd-helper image build test: %v\n%s", err, out)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", "--reflink=auto", store+"/.", dst+"/").CombinedOutput(); err != nil {
		t.Fatalf("copy the artifact store: %v\n%s", err, out)
	}
}

// fakeInternet gives the container an uplink: a veth from its network namespace to an
// "internet" namespace the test makes, holding a fake upstream DNS server (1.2.3.53) and
// TCP servers on 80 and 443 of ok.pkg.test (1.2.3.10) and evil.pkg.test (1.2.3.20). The packaged
// helper is a production build, whose DNS proxy refuses every address that is not
// globally reachable, documentation ranges included, so the fake hosts have public-looking
// addresses; they exist only on the loopback of the test's namespace, the container's only
// route leads there, and nothing leaves these namespaces. It returns the upstream.
func fakeInternet(t *testing.T, ctPID int) *dnsproxy.FakeUpstream {
	t.Helper()
	ip := testenv.RequireCommand(t, "ip")
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	inet, ct := fmt.Sprintf("broodpkgi%d", os.Getpid()), fmt.Sprintf("broodpkgc%d", os.Getpid())
	run("netns", "add", inet)
	t.Cleanup(func() { exec.Command(ip, "netns", "del", inet).Run() })
	run("netns", "attach", ct, strconv.Itoa(ctPID))
	t.Cleanup(func() { exec.Command(ip, "netns", "del", ct).Run() })
	run("link", "add", "up0", "netns", ct, "type", "veth", "peer", "name", "up0", "netns", inet)
	run("-n", ct, "addr", "add", "172.31.255.1/30", "dev", "up0")
	run("-n", ct, "link", "set", "up0", "up")
	run("-n", ct, "route", "add", "default", "via", "172.31.255.2")
	run("-n", inet, "addr", "add", "172.31.255.2/30", "dev", "up0")
	run("-n", inet, "link", "set", "up0", "up")
	run("-n", inet, "link", "set", "lo", "up")
	for _, a := range []string{"1.2.3.10/32", "1.2.3.20/32", "1.2.3.53/32"} {
		run("-n", inet, "addr", "add", a, "dev", "lo")
	}
	up, err := dnsproxy.NewFakeUpstream([]string{"ok.pkg.test. 60 IN A 1.2.3.10", "evil.pkg.test. 60 IN A 1.2.3.20"})
	if err != nil {
		t.Fatal(err)
	}
	inNetns(t, inet, func() error {
		srv, err := dnsproxy.Listen(up, "1.2.3.53:53")
		if err != nil {
			return err
		}
		t.Cleanup(func() { srv.Close(t.Context()) })
		for _, a := range []string{"1.2.3.10:443", "1.2.3.20:443", "1.2.3.10:80", "1.2.3.20:80"} {
			l, err := net.Listen("tcp", a)
			if err != nil {
				return err
			}
			t.Cleanup(func() { l.Close() })
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					c.Write([]byte("hello from " + a + "\n"))
					c.Close()
				}
			}()
		}
		return nil
	})
	return up
}

// inNetns runs f on a thread in the named network namespace (sockets it opens stay
// there), then returns the thread to the test's namespace.
func inNetns(t *testing.T, name string, f func() error) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if err := netns.Set(ns); err != nil {
		t.Fatal(err)
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		t.Fatalf("return to the test's netns: %v", err)
	}
	if ferr != nil {
		t.Fatal(ferr)
	}
}

// sessionID finds the session id in brood run output ("apply:   brood apply ID --all --yes").
var sessionID = regexp.MustCompile(`brood apply (\S+) --all --yes`)

// TestInstalledUnderSystemd is the appliance test: a Debian bookworm container booted
// with systemd (systemd-nspawn -b, own network namespace, /dev/net/tun), the built .deb
// installed with apt, then as a user in group brood: the socket activates the helper on
// first use, `brood doctor` passes, a VM session runs and is reviewed and applied, and an
// egress session reaches an allowed fake host through the DNS proxy while another is
// refused. Then `apt-get remove` leaves no tap, no nft table and no helper, and purge
// leaves no /var/lib/brood. Several minutes (two TCG boots; the first run also builds
// the cached rootfs and artifact store).
func TestInstalledUnderSystemd(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireFile(t, "/dev/net/tun", "the helper's taps")
	deb, _ := builtPackages(t)
	tarball := cachedRootfs(t)
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", tarball, "-C", root).CombinedOutput(); err != nil {
		t.Fatalf("unpack rootfs: %v\n%s", err, out)
	}
	unpacked := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-x", deb, unpacked).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v\n%s", err, out)
	}
	cachedStore(t, unpacked, filepath.Join(root, "var/lib/brood"))
	data, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "root/brood.deb"), data, 0o644); err != nil {
		t.Fatal(err)
	}

	c := bootContainer(t, root)
	start := time.Now()
	out := c.must("", "apt-get", "install", "-y", "--no-install-recommends", "/root/brood.deb")
	t.Logf("apt-get install:\n%s", tail(out, 1500))
	checkInstalled(t, c)
	up := fakeInternet(t, c.pid)
	// IT's configuration: the upstream resolver of this network (a conffile edit).
	c.must("", "sh", "-c", `sed -i 's|^#upstream = ""|upstream = "1.2.3.53:53"|' /etc/brood/helper.toml && grep -q '^upstream = "1.2.3.53:53"' /etc/brood/helper.toml`)
	c.must("", "useradd", "--create-home", "--groups", "brood", "dev")

	firstSession(t, c, start)
	onDemandBuildUnit(t, c)
	egressSession(t, c, up)
	upgradeKeepsHelper(t, c)
	removeAndPurge(t, c)
}

// checkInstalled: the postinst enabled and started the socket, the helper is not running
// yet, and systemd-analyze verify accepts the installed units.
func checkInstalled(t *testing.T, c *container) {
	t.Helper()
	if out, _ := c.exec("", "systemctl", "is-enabled", "broodd-helper.socket"); strings.TrimSpace(out) != "enabled" {
		t.Errorf("broodd-helper.socket is %q, want enabled", out)
	}
	if out, _ := c.exec("", "systemctl", "is-active", "broodd-helper.socket"); strings.TrimSpace(out) != "active" {
		t.Errorf("broodd-helper.socket is %q, want active", out)
	}
	if out, _ := c.exec("", "systemctl", "is-active", "broodd-helper.service"); strings.TrimSpace(out) != "inactive" {
		t.Errorf("broodd-helper.service is %q before any connection, want inactive", out)
	}
	out, err := c.exec("", "systemd-analyze", "verify", "--man=no", "/usr/lib/systemd/system/broodd-helper.socket", "/usr/lib/systemd/system/broodd-helper.service")
	if err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify of the installed units: %v\n%s", err, out)
	}
	if st, err := os.Stat(filepath.Join(c.root, "etc/brood/policy.toml")); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("/etc/brood/policy.toml: %v %v", st, err)
	}
}

// firstSession: doctor as the user activates the helper and passes; a VM session changes
// the workspace, is reviewed (brood diff) and applied.
func firstSession(t *testing.T, c *container, start time.Time) {
	t.Helper()
	doctor := c.must("dev", "brood", "doctor")
	t.Logf("brood doctor:\n%s", doctor)
	for _, want := range []string{"brood:          " + testDescribe, "helper:         " + testDescribe, "socket activation (systemd broodd-helper.socket)",
		// The unit's capability set, as the helper itself reports it (helper.capabilitiesCheck).
		"[ok  ] capabilities      effective cap_chown,cap_kill,cap_setgid,cap_setuid,cap_net_bind_service,cap_net_admin; " +
			"bounding cap_chown,cap_kill,cap_setgid,cap_setuid,cap_net_bind_service,cap_net_admin; ambient (none); inheritable (none)",
		"[ok  ] host firewall     no other nft or iptables-nft table drops",
		"[ok  ] user cgroups      runners are placed in transient scopes of systemd in brood-user-<uid>.slice"} {
		if !strings.Contains(doctor, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}
	if out, _ := c.exec("", "systemctl", "is-active", "broodd-helper.service"); strings.TrimSpace(out) != "active" {
		t.Errorf("broodd-helper.service is %q after the first connection, want active (socket activation)", out)
	}
	c.must("dev", "sh", "-c", "mkdir -p ~/w && echo one > ~/w/a.txt")
	out := c.must("dev", "sh", "-c", "cd ~/w && brood run-image test -- sh -c 'echo two > /workspace/b.txt && echo changed > /workspace/a.txt'")
	t.Logf("install to first session done: %v", time.Since(start).Round(time.Second))
	m := sessionID.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("brood run-image printed no session id:\n%s", out)
	}
	diff := c.must("dev", "sh", "-c", "cd ~/w && brood diff "+m[1])
	for _, want := range []string{"a.txt", "b.txt"} {
		if !strings.Contains(diff, want) {
			t.Errorf("brood diff lacks %s:\n%s", want, diff)
		}
	}
	// The runner ran in a transient scope of systemd's, in the user's slice with limits.
	uid := strings.TrimSpace(c.must("dev", "id", "-u"))
	slice := "brood-user-" + uid + ".slice"
	placed := c.must("", "journalctl", "-u", "broodd-helper.service", "-o", "cat", "--grep", "runner placed")
	if !strings.Contains(placed, "/brood.slice/brood-user.slice/"+slice+"/brood-runner-") {
		t.Errorf("helper log has no runner placed in %s:\n%s", slice, placed)
	}
	props := c.must("", "systemctl", "show", slice, "-p", "ActiveState", "-p", "MemoryMax", "-p", "CPUQuotaPerSecUSec")
	t.Logf("%s: %s", slice, props)
	if !strings.Contains(props, "ActiveState=active") || strings.Contains(props, "MemoryMax=infinity") || strings.Contains(props, "CPUQuotaPerSecUSec=infinity") {
		t.Errorf("%s: %s, want active with MemoryMax and CPUQuotaPerSecUSec set", slice, props)
	}
	c.must("dev", "sh", "-c", "cd ~/w && brood apply "+m[1]+" --all --yes")
	got := c.must("dev", "sh", "-c", "cat ~/w/a.txt ~/w/b.txt")
	if got != "changed\ntwo\n" {
		t.Errorf("after apply the workspace holds %q, want the VM's changes", got)
	}
}

// buildUnitBounding is the bounding set of a build child under systemd (the helper's
// buildUnitCapabilities), as the child logs it, in capability-number order.
const buildUnitBounding = "cap_chown,cap_dac_override,cap_fowner,cap_fsetid,cap_kill,cap_setgid,cap_setuid,cap_sys_chroot,cap_sys_admin,cap_mknod,cap_setfcap"

// onDemandBuildUnit: `brood image build codex` as the user, against the helper confined
// to the unit's capabilities, is not refused for want of capabilities: the helper starts
// the build as a transient unit brood-build-<id>.service of systemd's, whose child runs
// outside the helper's cgroup with the build capability set (it logs both first in its
// build log) and reports through the progress pipe systemd passed as its stdout. The
// container has no network and no mmdebstrap, so the build fails fast with the child's
// own error.
func onDemandBuildUnit(t *testing.T, c *container) {
	t.Helper()
	start := time.Now()
	out, err := c.exec("dev", "brood", "image", "build", "codex")
	t.Logf("brood image build codex (%v, %v):\n%s", err, time.Since(start).Round(time.Millisecond), tail(out, 3000))
	if err == nil {
		t.Fatal("the build of codex succeeded in a container without network")
	}
	for _, bad := range []string{"capabilities this helper does not have", "ended without a result", "malformed progress record", "unavailable"} {
		if strings.Contains(out, bad) {
			t.Errorf("brood image build codex says %q: the build did not run as a transient unit with its own capabilities", bad)
		}
	}
	if !strings.Contains(out, "build log") && !strings.Contains(out, "failed") {
		t.Errorf("brood image build codex reports no failed build with its log:\n%s", out)
	}
	started := c.must("", "journalctl", "-u", "broodd-helper.service", "-o", "cat", "--grep", "image build started")
	if !regexp.MustCompile(`child="unit brood-build-[0-9a-f]{12}\.service"`).MatchString(started) {
		t.Errorf("helper log has no build started as a transient unit:\n%s", started)
	}
	log := c.must("", "head", "-n", "1", "/var/lib/brood/logs/build-codex.log")
	t.Logf("build log: %s", log)
	if !strings.HasPrefix(log, "broodd-helper: build child: bounding "+buildUnitBounding+"; cgroup ") ||
		!regexp.MustCompile(`/system\.slice/brood-build-[0-9a-f]{12}\.service`).MatchString(log) || strings.Contains(log, "broodd-helper.service") {
		t.Errorf("build child identity %q, want bounding set %s in a cgroup of its own brood-build-<id>.service", log, buildUnitBounding)
	}
	helper := strings.TrimSpace(c.must("", "systemctl", "show", "--property=CapabilityBoundingSet", "--value", "broodd-helper.service"))
	if strings.Contains(helper, "cap_sys_admin") || !strings.Contains(helper, "cap_net_admin") {
		t.Errorf("the helper's unit bounding set is %q: it must stay without cap_sys_admin", helper)
	}
}

// egressSession: under --egress locked with ok.pkg.test allowed on port 80, the guest
// resolves it through the session's DNS proxy (port 53: CAP_NET_BIND_SERVICE under the
// unit) and connects with its name in the Host header, which the session's name gate
// admits; the same address with another name in Host is reset by the gate, and
// evil.pkg.test is refused by the proxy and its address is not reachable. (The guest has
// no TLS client, so the gate's SNI half is left to the egress package's tests.)
func egressSession(t *testing.T, c *container, up *dnsproxy.FakeUpstream) {
	t.Helper()
	req := func(host string) string { return `printf "GET / HTTP/1.0\r\nHost: ` + host + `\r\n\r\n"` }
	script := "busybox nslookup ok.pkg.test; " + req("ok.pkg.test") + " | busybox nc -w 5 1.2.3.10 80 && echo ALLOWED-OK; " +
		req("evil.pkg.test") + " | busybox nc -w 5 1.2.3.10 80 | grep -q hello && echo FRONTED-OPEN; " +
		"busybox nslookup evil.pkg.test && echo EVIL-RESOLVED; busybox nc -w 3 1.2.3.20 443 </dev/null && echo EVIL-OPEN; echo done"
	out, err := c.exec("dev", "sh", "-c", "cd ~/w && brood run-image --egress locked --allow-host ok.pkg.test:80 test -- sh -c '"+script+"'")
	t.Logf("egress session (%v):\n%s", err, out)
	for _, want := range []string{"hello from 1.2.3.10:80", "ALLOWED-OK", "done"} {
		if !strings.Contains(out, want) {
			t.Errorf("egress session output lacks %q", want)
		}
	}
	for _, bad := range []string{"FRONTED-OPEN", "EVIL-RESOLVED", "EVIL-OPEN", "hello from 1.2.3.20"} {
		if strings.Contains(out, bad) {
			t.Errorf("the guest reached a host it may not (%q)", bad)
		}
	}
	if !up.Asked("ok.pkg.test") {
		t.Error("the allowed name never reached the upstream through the DNS proxy")
	}
	if up.Asked("evil.pkg.test") {
		t.Error("the refused name reached the upstream")
	}
}

// upgradeKeepsHelper: reinstalling the package (dpkg runs the upgrade paths of the
// maintainer scripts) leaves the running helper, and so its sessions, alone.
func upgradeKeepsHelper(t *testing.T, c *container) {
	t.Helper()
	pid := func() string {
		out := c.must("", "systemctl", "show", "--property=MainPID", "--value", "broodd-helper.service")
		return strings.TrimSpace(out)
	}
	before := pid()
	if before == "0" {
		t.Fatal("the helper is not running before the upgrade (idle exit too early?)")
	}
	c.must("", "apt-get", "install", "-y", "--reinstall", "/root/brood.deb")
	if after := pid(); after != before {
		t.Errorf("the upgrade restarted the helper (pid %s -> %s): running sessions would end", before, after)
	}
}

// removeAndPurge: apt-get remove stops the socket and the helper and cleans up (no tap,
// no nft table, no helper process); purge removes /var/lib/brood and /etc/brood.
func removeAndPurge(t *testing.T, c *container) {
	t.Helper()
	c.must("", "apt-get", "remove", "-y", "brood")
	// Interface names, one per line ("3: brd1234abcd: <...>"); "brd" alone also starts
	// the broadcast address field.
	if out, _ := c.exec("", "ip", "-o", "link", "show"); regexp.MustCompile(`(?m)^\d+: brd`).MatchString(out) {
		t.Errorf("taps left after remove:\n%s", out)
	}
	if out, err := c.exec("", "nft", "list", "table", "inet", "brood"); err == nil {
		t.Errorf("nft table inet brood left after remove:\n%s", out)
	}
	exes := c.must("", "sh", "-c", "for p in /proc/[0-9]*; do readlink $p/exe; done; true")
	if strings.Contains(exes, "broodd-helper") || strings.Contains(exes, "qemu-system") {
		t.Errorf("helper or VMM processes left after remove:\n%s", exes)
	}
	if _, err := os.Stat(filepath.Join(c.root, "var/lib/brood")); err != nil {
		t.Errorf("remove (not purge) deleted /var/lib/brood: %v", err)
	}
	c.must("", "apt-get", "purge", "-y", "brood")
	for _, p := range []string{"var/lib/brood", "etc/brood"} {
		if _, err := os.Lstat(filepath.Join(c.root, p)); err == nil {
			t.Errorf("/%s left after purge", p)
		}
	}
}
