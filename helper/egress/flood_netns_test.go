package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// Environment of the processes TestEgressDNSFlood re-executes: the helper's scenario (netns
// names) and the guest's attacker (proxy address and connection count).
const (
	floodNetnsEnv    = "BROOD_FLOOD_NETNS"
	floodAttackerEnv = "BROOD_FLOOD_ATTACK"
)

// floodConns is how many TCP connections the guest opens and holds (the review held
// ~3,000); floodHelperNOFILE is the helper's descriptor limit meanwhile, well below it.
const (
	floodConns        = 3000
	floodHelperNOFILE = 1024
)

// TestEgressDNSFlood performs the descriptor-exhaustion attack on the DNS proxy: a guest
// opens floodConns TCP connections to its session's proxy and holds them while the helper
// runs with RLIMIT_NOFILE floodHelperNOFILE. It measures the helper's descriptors while
// they are held, shows that the helper still accepts a new client connection, that the
// other session's proxy and the attacker's own UDP answer, and how long the attacker's TCP
// takes to be answered again once it lets go.
func TestEgressDNSFlood(t *testing.T) {
	if v := os.Getenv(floodAttackerEnv); v != "" {
		floodAttacker(t, v)
		return
	}
	if v := os.Getenv(floodNetnsEnv); v != "" {
		floodScenario(t, strings.Split(v, ","))
		return
	}
	runInHost(t, "TestEgressDNSFlood", floodNetnsEnv, newEgressBed(t), unitCaps)
}

// floodAttacker is the guest: it dials n connections to addr, reports "held <n>" on
// stdout and keeps them open until its stdin is closed.
func floodAttacker(t *testing.T, v string) {
	addr, nstr, _ := strings.Cut(v, ",")
	n, _ := strconv.Atoi(nstr)
	var held []net.Conn
	for range n {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("dial %s after %d connections: %v", addr, len(held), err)
		}
		held = append(held, c)
	}
	fmt.Printf("held %d\n", len(held))
	io.Copy(io.Discard, os.Stdin)
	for _, c := range held {
		c.Close()
	}
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func floodScenario(t *testing.T, names []string) {
	st, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(st), "\n") {
		if strings.HasPrefix(l, "CapEff:") || strings.HasPrefix(l, "CapBnd:") || strings.HasPrefix(l, "NoNewPrivs:") {
			t.Log("helper", l)
		}
	}
	e := startBedManager(t, names)
	sa := startLocked(t, e, "aaaa0001")
	sb := startLocked(t, e, "bbbb0002")
	dnsA, dnsB := net.JoinHostPort(sa.Info.DNS, "53"), net.JoinHostPort(sb.Info.DNS, "53")
	waitAnswered(t, names[2], dnsA)
	waitAnswered(t, names[3], dnsB)
	var old unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &old)
	lim := unix.Rlimit{Cur: floodHelperNOFILE, Max: old.Max}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
	before := openFDs(t)

	// The guest: a process of its own in guest 1's netns.
	att := exec.Command("ip", "netns", "exec", names[2], os.Args[0], "-test.run", "^TestEgressDNSFlood$")
	att.Env = append(os.Environ(), floodAttackerEnv+"="+dnsA+","+strconv.Itoa(floodConns))
	stdin, _ := att.StdinPipe()
	stdout, _ := att.StdoutPipe()
	att.Stderr = os.Stderr
	if err := att.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != fmt.Sprintf("held %d\n", floodConns) {
		stdin.Close()
		att.Wait()
		t.Fatalf("attacker: %q, %v", line, err)
	}
	during := openFDs(t)
	t.Logf("guest holds %d TCP connections to its proxy; helper descriptors %d -> %d (limit %d, cap %d)",
		floodConns, before, during, floodHelperNOFILE, MaxDNSTCPConns)
	if during-before > MaxDNSTCPConns+8 {
		t.Errorf("the flood took %d of the helper's descriptors, want at most the cap %d (+8)", during-before, MaxDNSTCPConns)
	}
	// The guest's TCP lands in the session's egress process, within its own limit.
	pid := sa.proc.cmd.Process.Pid
	procFDs, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("egress process %d holds %d descriptors (RLIMIT_NOFILE %d)", pid, len(procFDs), ProcMaxFDs)
	if len(procFDs) > ProcMaxFDs {
		t.Errorf("egress process holds %d descriptors, over its limit %d", len(procFDs), ProcMaxFDs)
	}
	checkProcConfined(t, pid)
	// The helper still accepts a new client connection on a unix socket, as Serve does.
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("helper listens during the flood: %v", err)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("client dials during the flood: %v", err)
	}
	if a, err := ln.Accept(); err != nil {
		t.Errorf("helper accepts during the flood: %v", err)
	} else {
		a.Close()
	}
	c.Close()
	ln.Close()
	for _, q := range []struct{ ns, network, addr string }{{names[3], "tcp", dnsB}, {names[3], "udp", dnsB}, {names[2], "udp", dnsA}} {
		if r, err := queryIn(q.ns, q.network, q.addr, "ok.pkg.test.", dns.TypeA); err != nil || r.Rcode != dns.RcodeSuccess {
			t.Errorf("%s query to %s during the flood = %v, %v", q.network, q.addr, r, err)
		}
	}
	stdin.Close()
	att.Wait()
	t0 := time.Now()
	for {
		r, err := queryIn(names[2], "tcp", dnsA, "ok.pkg.test.", dns.TypeA)
		if err == nil && r.Rcode == dns.RcodeSuccess {
			break
		}
		if time.Since(t0) > 60*time.Second {
			t.Fatalf("session A's TCP proxy not answering 60 s after the flood: %v, %v", r, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("session A's TCP proxy answered again %v after the guest let go", time.Since(t0))
	// The egress process dies with its session.
	if _, err := e.Stop("aaaa0001"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(pid, 0); err != unix.ESRCH {
		t.Errorf("egress process %d after its session stopped: kill(0) = %v, want ESRCH", pid, err)
	}
}

// checkProcConfined reads /proc/<pid>/status and limits of an egress process: the session
// owner's uid and gid (1000 in these tests) and no other group, no capability,
// no_new_privs, and RLIMIT_NOFILE ProcMaxFDs.
func checkProcConfined(t *testing.T, pid int) {
	t.Helper()
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Uid:\t1000\t1000\t1000\t1000\n", "Gid:\t1000\t1000\t1000\t1000\n", "Groups:\t \n",
		"NoNewPrivs:\t1\n", "CapEff:\t0000000000000000\n", "CapPrm:\t0000000000000000\n"} {
		if !strings.Contains(string(st), want) {
			t.Errorf("egress process status lacks %q:\n%s", want, st)
		}
	}
	lim, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(fmt.Sprintf(`Max open files\s+%d\s+%d\s`, ProcMaxFDs, ProcMaxFDs)).Match(lim) {
		t.Errorf("egress process limits:\n%s", lim)
	}
}
