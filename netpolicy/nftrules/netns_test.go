package nftrules

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"testing"

	"brood.dev/brood/internal/testenv"
	"github.com/google/nftables"
)

// testNetns creates a throw-away network namespace (ip netns add) and returns its name and
// an NFT bound to it; both are removed when the test ends.
func testNetns(t *testing.T) (string, *NFT) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "ip")
	testenv.RequireCommand(t, "nft")
	b := make([]byte, 4)
	rand.Read(b)
	name := "broodt" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	f, err := os.Open("/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	n, err := NewNFT(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return name, n
}

// nsRun runs a command inside netns ns and returns its standard output.
func nsRun(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("in netns %s: %v: %v\n%s", ns, args, err, stderr)
	}
	return string(out)
}
