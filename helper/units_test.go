package helper

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"
)

// repoFile returns the path of a file relative to the repository root.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(here), "..", rel)
}

// TestSystemdUnitsVerify runs systemd-analyze verify on the units, with ExecStart pointing
// at a freshly built broodd-helper. Any diagnostic (even a warning such as an unknown key)
// fails the test.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze := testenv.RequireCommand(t, "systemd-analyze")
	goBin := testenv.RequireCommand(t, "go")
	dir := t.TempDir()
	bin := filepath.Join(dir, "broodd-helper")
	build := exec.Command(goBin, "build", "-o", bin, "brood.dev/brood/cmd/broodd-helper")
	build.Dir = filepath.Dir(repoFile(t, "go.mod"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build broodd-helper: %v\n%s", err, out)
	}
	var units []string
	for _, name := range []string{"broodd-helper.socket", "broodd-helper.service"} {
		data, err := os.ReadFile(repoFile(t, "systemd/"+name))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(data), "/usr/sbin/broodd-helper", bin)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, p)
	}
	cmd := exec.Command(analyze, append([]string{"verify", "--man=no"}, units...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The hardening properties the units must carry, spelled exactly.
	svc, _ := os.ReadFile(units[1])
	sock, _ := os.ReadFile(units[0])
	for _, want := range []string{"Type=notify", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=read-only",
		"PrivateTmp=yes", "CapabilityBoundingSet=CAP_NET_ADMIN CAP_SETUID CAP_SETGID CAP_KILL CAP_CHOWN CAP_NET_BIND_SERVICE", "ExecStopPost=" + bin + " --cleanup"} {
		if !strings.Contains(string(svc), want+"\n") {
			t.Errorf("service lacks %q", want)
		}
	}
	for _, want := range []string{"ListenStream=/run/brood/helper.sock", "SocketMode=0660", "SocketGroup=brood", "FileDescriptorName=" + SocketFDName} {
		if !strings.Contains(string(sock), want+"\n") {
			t.Errorf("socket lacks %q", want)
		}
	}
}

// TestSystemdVerifyCatchesErrors proves the verify test can fail: a unit with a bad
// ExecStart is reported.
func TestSystemdVerifyCatchesErrors(t *testing.T) {
	analyze := testenv.RequireCommand(t, "systemd-analyze")
	dir := t.TempDir()
	p := filepath.Join(dir, "broken.service")
	os.WriteFile(p, []byte("[Service]\nType=notify\nExecStart=/nonexistent/broodd-helper\n"), 0o644)
	out, err := exec.Command(analyze, "verify", "--man=no", p).CombinedOutput()
	if err == nil && len(strings.TrimSpace(string(out))) == 0 {
		t.Errorf("systemd-analyze verify accepted a unit with a missing ExecStart")
	}
}

// TestLaunchdPlist parses the plist as XML (and with xmllint where installed) and checks
// the Sockets entry carries the socket name the helper takes.
func TestLaunchdPlist(t *testing.T) {
	p := repoFile(t, "launchd/dev.brood.helper.plist")
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	dec.Strict = true
	var keys []string
	var inKey bool
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("plist XML: %v", err)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			inKey = v.Name.Local == "key"
		case xml.CharData:
			if inKey {
				keys = append(keys, string(v))
			}
		case xml.EndElement:
			inKey = false
		}
	}
	joined := strings.Join(keys, ",")
	for _, want := range []string{"Label", "ProgramArguments", "Sockets," + SocketFDName + ",", "SockPathName", "SockPathMode"} {
		if !strings.Contains(joined, want) {
			t.Errorf("plist keys %s lack %q", joined, want)
		}
	}
	xmllint := testenv.RequireCommand(t, "xmllint")
	if out, err := exec.Command(xmllint, "--noout", p).CombinedOutput(); err != nil {
		t.Errorf("xmllint: %v\n%s", err, out)
	}
}
