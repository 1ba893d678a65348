package egress

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/testenv"
)

// serveWipeChild is the mode in which the test binary runs serveProc with secrets on
// the descriptors the test gives it, then reports on its own non-dumped memory.
const serveWipeChild = "egress-serve-wipe"

// serveWipeMain runs serveProc (with secrets) on descriptors 3..9 and, once it returned
// (the test closed the control socket: the session ended), prints how many mappings of
// the process are writable, marked "dd" and not droppable (the arena's: the Go runtime
// marks none) and how many non-zero bytes they hold.
func serveWipeMain() int {
	if err := serveProc(slog.New(slog.NewTextHandler(os.Stderr, nil)), "wipe0001", "127.0.0.1:53", true); err != nil {
		fmt.Println("serve:", err)
		return 1
	}
	maps, err := testenv.Smaps("self")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	dd, nonzero := 0, 0
	for _, m := range maps {
		// Not [vvar] and the like, nor the vDSO getrandom state ("dp", droppable).
		if !m.Has("dd") || m.Perms != "rw-p" || m.Has("dp") {
			continue
		}
		dd++
		buf := make([]byte, m.End-m.Start)
		if _, err := mem.ReadAt(buf, int64(m.Start)); err != nil {
			fmt.Println(err)
			return 1
		}
		nonzero += len(buf) - bytes.Count(buf, []byte{0})
	}
	fmt.Printf("dd mappings %d, non-zero bytes %d\n", dd, nonzero)
	return 0
}

// TestSessionEndWipes runs the egress process's serve loop (serveProc, as ProxyMain
// runs it after confining itself) with secret bindings in a child, on loopback sockets.
// While the session runs one non-dumped mapping of the child holds both real values;
// after the control socket closed, serveProc has returned and every such mapping (the
// table's, and the one the message was read into) is all zero. As root the mapping is
// locked and nothing is logged; as the session's uid under RLIMIT_MEMLOCK 0 it is not
// locked and the child logs that.
func TestSessionEndWipes(t *testing.T) {
	testenv.RequireRoot(t) // reading the child's memory, and the uid change
	t.Run("locked", func(t *testing.T) {
		locked, log := serveAndEnd(t, false)
		if !locked || strings.Contains(log, "not locked") {
			t.Errorf("locked %v, log %q", locked, log)
		}
	})
	t.Run("RLIMIT_MEMLOCK 0", func(t *testing.T) {
		locked, log := serveAndEnd(t, true)
		if locked || !strings.Contains(log, "secret bindings not locked in memory") || !strings.Contains(log, "RLIMIT_MEMLOCK 0 bytes") {
			t.Errorf("locked %v, log %q", locked, log)
		}
	})
}

// serveAndEnd runs serveWipeChild (as root, or with memlock0 as probeUID under
// RLIMIT_MEMLOCK 0), sends it the canary bindings, checks the values are in one
// non-dumped mapping, ends the session, checks the child found its non-dumped memory
// all zero, and returns whether that mapping was locked and the child's log.
func serveAndEnd(t *testing.T, memlock0 bool) (bool, string) {
	files, ctl := serveFiles(t)
	cmd := exec.Command(publicTestBinary(t), serveWipeChild)
	cmd.ExtraFiles = files
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	cmd.Stderr = &log
	if memlock0 {
		asProbeUID(cmd, probeUID)
		var saved unix.Rlimit
		unix.Getrlimit(unix.RLIMIT_MEMLOCK, &saved)
		unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: 0, Max: saved.Max})
		defer unix.Setrlimit(unix.RLIMIT_MEMLOCK, &saved)
	}
	err = cmd.Start()
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	s := api.SessionSecrets{Bindings: []api.SecretBinding{
		{Name: "$API_KEY", Placeholder: phAPI, Value: canaryAPI, Hosts: []string{"api.bound.test"}},
		{Name: "$OTHER_KEY", Placeholder: phOther, Value: canaryOther, Hosts: []string{"other.bound.test"}},
	}}
	if ca, err := sendSecrets(ctl, s, nil); err != nil || ca == "" {
		ctl.Close()
		t.Fatalf("session CA: %q, %v", ca, err)
	}
	in, _ := canaryMappings(t, cmd.Process.Pid)
	if len(in) != 1 {
		t.Errorf("while the session runs: %d non-dumped mappings hold the values (%+v), want one", len(in), in)
	}
	ctl.Close()
	l, err := bufio.NewReader(out).ReadString('\n')
	var dd, nonzero int
	if _, serr := fmt.Sscanf(l, "dd mappings %d, non-zero bytes %d\n", &dd, &nonzero); err != nil || serr != nil || dd == 0 || nonzero != 0 {
		t.Errorf("after the session's end: %q (%v), want non-dumped mappings, all zero", l, err)
	}
	cmd.Wait()
	return len(in) == 1 && in[0].Has("lo"), log.String()
}

// serveFiles returns the descriptors serveProc expects (procFD*: a SOCK_SEQPACKET
// control socket, then DNS and gate sockets, bound on 127.0.0.1 at ports the kernel
// picks) and the test's end of the control socket.
func serveFiles(t *testing.T) ([]*os.File, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine := os.NewFile(uintptr(fds[0]), "ctl")
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	files := []*os.File{os.NewFile(uintptr(fds[1]), "ctl-child")}
	for range 2 {
		pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		pf, _ := pc.(*net.UDPConn).File()
		lf, _ := l.(*net.TCPListener).File()
		pc.Close()
		l.Close()
		files = append(files, pf, lf)
	}
	for range 2 {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f, _ := l.(*net.TCPListener).File()
		l.Close()
		files = append(files, f)
	}
	if len(files) != procFDCount {
		t.Fatalf("%d descriptors, want %d", len(files), procFDCount)
	}
	return files, c.(*net.UnixConn)
}
