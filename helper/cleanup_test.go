//go:build linux

package helper

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"brood.dev/brood/helper/egress"
	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy/nftrules"
)

func TestCleanupFakes(t *testing.T) {
	links := &egress.FakeLinks{Taps: []string{"brd0001", "eth0", "brd0002", "tap0"}}
	fw := &nftrules.Fake{}
	if err := fw.EnsureTable(); err != nil {
		t.Fatal(err)
	}
	runners := &FakeRunners{Orphans: []int{101, 102}}
	rep, err := Cleanup(discardLog(), links, fw, runners)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Taps, []string{"brd0001", "brd0002"}) || !slices.Equal(links.Taps, []string{"eth0", "tap0"}) {
		t.Errorf("taps: report %v, left %v", rep.Taps, links.Taps)
	}
	if fw.HasTable() || !rep.Table || !slices.Equal(runners.Killed, []int{101, 102}) {
		t.Errorf("table %v, killed %v", fw.HasTable(), runners.Killed)
	}
	// Idempotent: a second run finds nothing and fails on nothing.
	rep, err = Cleanup(discardLog(), links, fw, runners)
	if err != nil || len(rep.Taps) != 0 || len(rep.Runners) != 0 {
		t.Errorf("second cleanup: %+v, %v", rep, err)
	}
}

// TestCleanupNetns creates, in a fresh network namespace, brd* taps, a non-brood tap, a
// veth named brd*, the table "inet brood" and another table, then runs the real
// netlink/nftables cleanup there twice.
func TestCleanupNetns(t *testing.T) {
	requireRoot(t)
	ns := testenv.InNewNetns(t, func() error {
		for _, name := range []string{"brd0a1b2c3d", "brd11111111", "tapkeep"} {
			if err := netlink.LinkAdd(&netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: name}, Mode: netlink.TUNTAP_MODE_TAP}); err != nil {
				t.Fatalf("create tap %s: %v", name, err)
			}
		}
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "brdveth"}, PeerName: "vethpeer"}); err != nil {
			t.Fatal(err)
		}
		return nil
	})
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: nftrules.TableName})
	c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "keep"})
	c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: nftrules.TableName}) // ip brood: not ours
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}

	links, err := egress.NewNetlinkLinks(int(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer links.Close()
	fw, err := nftrules.NewNFT(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	rep, err := Cleanup(discardLog(), links, fw, nil)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rep.Taps)
	if !slices.Equal(rep.Taps, []string{"brd0a1b2c3d", "brd11111111"}) {
		t.Errorf("deleted taps %v", rep.Taps)
	}
	h, _ := netlink.NewHandleAt(ns)
	defer h.Close()
	var left []string
	all, _ := h.LinkList()
	for _, l := range all {
		left = append(left, l.Attrs().Name)
	}
	slices.Sort(left)
	if !slices.Equal(left, []string{"brdveth", "lo", "tapkeep", "vethpeer"}) {
		t.Errorf("links left %v, want brdveth lo tapkeep vethpeer", left)
	}
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tb := range tables {
		names = append(names, fmt.Sprintf("%d/%s", tb.Family, tb.Name))
	}
	for _, tb := range tables {
		if tb.Family == nftables.TableFamilyINet && tb.Name == nftrules.TableName {
			t.Errorf("inet brood survived: %v", names)
		}
	}
	if len(tables) != 2 {
		t.Errorf("tables left %v, want inet keep and ip brood", names)
	}
	rep, err = Cleanup(discardLog(), links, fw, nil)
	if err != nil || len(rep.Taps) != 0 {
		t.Errorf("second cleanup: %+v, %v", rep, err)
	}
}

// TestProcRunnersOrphans: an orphaned runner (this executable or its execute-only copy
// with argv[1] vm-run, its parent gone) is found and killed; a runner that is our own
// child and an unrelated process are left alone.
func TestProcRunnersOrphans(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	runtimeDir := t.TempDir()
	copyPath, err := SelfCopy(runtimeDir)
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), childEnv+"=sleep")
	// Orphans: started through a shell that exits at once (reparented to a reaper).
	startOrphan := func(exe string) int {
		sh := exec.Command("/bin/sh", "-c", `"$0" vm-run </dev/null >/dev/null 2>&1 & echo $!`, exe)
		sh.Env = env
		out, err := sh.Output()
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
		return pid
	}
	orphan, orphanCopy := startOrphan(self), startOrphan(copyPath)
	// Our own runner child.
	own := exec.Command(self, spawner.RunnerSubcommand)
	own.Env = env
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { own.Process.Kill(); own.Wait() })
	// Unrelated: same binary, other argv.
	other := exec.Command(self, "not-a-runner")
	other.Env = env
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })

	r := &ProcRunners{Proc: "/proc", Exe: self, Copy: SelfCopyPath(runtimeDir, self), Self: os.Getpid()}
	waitFor(t, func() bool {
		pids, _ := r.ListOrphans()
		return slices.Contains(pids, orphan) && slices.Contains(pids, orphanCopy)
	})
	pids, err := r.ListOrphans()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(pids, own.Process.Pid) || slices.Contains(pids, other.Process.Pid) {
		t.Errorf("orphans %v include own child %d or unrelated %d", pids, own.Process.Pid, other.Process.Pid)
	}
	rep, err := Cleanup(discardLog(), nil, nil, r)
	if err != nil || !slices.Contains(rep.Runners, orphan) || !slices.Contains(rep.Runners, orphanCopy) {
		t.Fatalf("cleanup = %+v, %v", rep, err)
	}
	waitGone(t, orphan, 5*time.Second)
	waitGone(t, orphanCopy, 5*time.Second)
	if !alive(own.Process.Pid) || !alive(other.Process.Pid) {
		t.Errorf("cleanup killed our own runner or an unrelated process")
	}
	if err := r.Kill(orphan); err != nil {
		t.Errorf("killing a dead pid again: %v", err)
	}
}

// TestProcRunnersOursOtherInstance: when a runner's exe link is unreadable (the helper
// without CAP_SYS_PTRACE), only a runner started from this helper's own executable or
// copy is an orphan of it; another helper instance's runner, whose program has the same
// base name under another runtime directory, is not (a base-name match killed the
// runners of concurrently running helpers).
func TestProcRunnersOursOtherInstance(t *testing.T) {
	r := &ProcRunners{Exe: "/usr/sbin/broodd-helper", Copy: "/run/brood/self/broodd-helper"}
	for _, tc := range []struct {
		argv0, exe string
		err        error
		want       bool
	}{
		{"/run/brood/self/broodd-helper", "", fs.ErrPermission, true},
		{"/usr/sbin/broodd-helper", "", fs.ErrPermission, true},
		{"/tmp/other/self/broodd-helper", "", fs.ErrPermission, false},
		{"broodd-helper", "", fs.ErrPermission, false},
		{"/opt/x/broodd-helper", "", fs.ErrPermission, false},
		{"x", "/run/brood/self/broodd-helper (deleted)", nil, true},
		{"/run/brood/self/broodd-helper", "/tmp/other/self/broodd-helper", nil, false},
		{"/run/brood/self/broodd-helper", "", fs.ErrNotExist, false},
	} {
		if got := r.ours(tc.argv0, tc.exe, tc.err); got != tc.want {
			t.Errorf("ours(%q, %q, %v) = %v, want %v", tc.argv0, tc.exe, tc.err, got, tc.want)
		}
	}
}
