package egress

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/landlockabi"
	"brood.dev/brood/internal/testenv"
)

// confineProbe is the argument that makes the test binary confine itself as the egress
// process does and report what it can still do (confineProbeMain).
const confineProbe = "egress-confine-probe"

// confineProbeMain runs confineProc (upstream TCP port 53) and prints one line per
// attempt: reading a file, creating one, a TCP connect to another port, to the gate's
// ports 443 and 80, and its limits.
func confineProbeMain() int {
	if err := confineProc(53); err != nil {
		fmt.Println("confine:", err)
		return 1
	}
	_, err := os.ReadFile("/etc/hostname")
	fmt.Println("read /etc/hostname:", errors.Is(err, unix.EACCES))
	_, err = os.Create(os.TempDir() + "/brood-egress-probe")
	fmt.Println("create in tmp:", errors.Is(err, unix.EACCES))
	_, err = net.Dial("tcp", "127.0.0.1:8080")
	fmt.Println("connect tcp 127.0.0.1:8080:", errors.Is(err, unix.EACCES))
	// The name gate's upstream ports: not refused by Landlock (refused by the kernel or
	// connected, whatever listens there).
	for _, port := range []string{"443", "80"} {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if c != nil {
			c.Close()
		}
		fmt.Printf("connect tcp 127.0.0.1:%s allowed: %v\n", port, !errors.Is(err, unix.EACCES))
	}
	dumpable, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	nnp, _ := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	var lim unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	fmt.Printf("dumpable %d no_new_privs %d nofile %d/%d\n", dumpable, nnp, lim.Cur, lim.Max)
	return 0
}

// trustProbe makes the test binary load the trust store as an egress process with
// secrets does, confine itself, then verify a root of the host's store (trustProbeMain).
const trustProbe = "egress-trust-probe"

// trustProbeMain reads the first certificate of the host's bundle, runs loadTrustStore
// (unless the argument is "cold") and confineProc, and prints whether the certificate
// verifies against the system roots.
func trustProbeMain(warm bool) int {
	data, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		fmt.Println("bundle:", err)
		return 1
	}
	block, _ := pem.Decode(data)
	if block == nil {
		fmt.Println("bundle: no certificate")
		return 1
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		fmt.Println("bundle:", err)
		return 1
	}
	if warm {
		if err := loadTrustStore(); err != nil {
			fmt.Println(err)
			return 1
		}
	}
	if err := confineProc(53); err != nil {
		fmt.Println("confine:", err)
		return 1
	}
	_, err = cert.Verify(x509.VerifyOptions{})
	fmt.Println("verified:", err == nil)
	return 0
}

// TestProcTrustStore: the system roots loaded before confinement verify a certificate
// after it (the terminator's upstream check in production); without loading them first,
// Landlock leaves the store unreadable and nothing verifies.
func TestProcTrustStore(t *testing.T) {
	testenv.RequireFile(t, "/etc/ssl/certs/ca-certificates.crt", "the host trust store (Debian ca-certificates)")
	for _, c := range []struct{ arg, want string }{{"warm", "verified: true\n"}, {"cold", "verified: false\n"}} {
		out, err := exec.Command(os.Args[0], trustProbe, c.arg).CombinedOutput()
		if err != nil || string(out) != c.want {
			t.Errorf("%s probe: %v %q, want %q", c.arg, err, out, c.want)
		}
	}
}

// TestProcConfinement: once confined, the egress process can neither read nor create a
// file, nor connect over TCP but to the upstream's port and the name gate's 443 and 80
// (Landlock, pinned ABI); it is not dumpable, has no_new_privs and RLIMIT_NOFILE
// ProcMaxFDs.
func TestProcConfinement(t *testing.T) {
	if abi, _ := landlockabi.Kernel(); abi < landlockabi.Pinned {
		testenv.Skip(t, fmt.Sprintf("kernel Landlock ABI %d < pinned %d", abi, landlockabi.Pinned))
	}
	out, err := exec.Command(os.Args[0], confineProbe).CombinedOutput()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	want := fmt.Sprintf("read /etc/hostname: true\ncreate in tmp: true\nconnect tcp 127.0.0.1:8080: true\nconnect tcp 127.0.0.1:443 allowed: true\nconnect tcp 127.0.0.1:80 allowed: true\ndumpable 0 no_new_privs 1 nofile %d/%d\n", ProcMaxFDs, ProcMaxFDs)
	if string(out) != want {
		t.Errorf("confined egress process:\n%s\nwant:\n%s", out, want)
	}
	if strings.Contains(string(out), "false") {
		t.Error("the egress process kept a right it must not have")
	}
}
