package vmtest

import (
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"

	"golang.org/x/crypto/ssh"

	"brood.dev/brood/sandbox/guestcfg"
)

// checkTrustCA sends a trust-CA request to the running guest of r (called from
// TestVMHomeFiles, sharing its boot, before any command session of its own): the CA
// lands in the system bundle and in its own file, both root-owned 0644, so the agent
// (uid 123456) can read but not change them.
func checkTrustCA(t *testing.T, r *vmRun) {
	t.Helper()
	ca := []byte(testenv.CAPEM(t))
	s, err := r.client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	ok, err := s.SendRequest(guestcfg.TrustCARequest, true, ssh.Marshal(guestcfg.TrustCA{PEM: ca}))
	s.Close()
	if err != nil || !ok {
		t.Fatalf("trust-CA request: %v, accepted %v", err, ok)
	}
	out, errOut, code := r.run(t, `stat -c '%u %a' `+guestcfg.SystemBundle+` `+guestcfg.SessionCAFile+
		` && tail -c 2000 `+guestcfg.SystemBundle+` && test -w `+guestcfg.SystemBundle+`; echo write=$?`)
	if code != 0 || !strings.HasPrefix(out, "0 644\n0 644\n") || !strings.Contains(out, strings.TrimSpace(string(ca))) ||
		!strings.HasSuffix(out, "write=1\n") {
		t.Fatalf("status %d stdout %q stderr %q", code, out, errOut)
	}
}
