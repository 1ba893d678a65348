package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/internal/version"
	"brood.dev/brood/sandbox"
)

// fakeHelper answers hello (and doctor) like broodd-helper would, or refuses every call
// with errCode. It imports only helper/api, like the frontend.
func fakeHelper(t *testing.T, errCode api.Code) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "helper.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			uc, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			go func() {
				defer uc.Close()
				c := api.NewConn(uc)
				for {
					body, files, err := c.ReadFrame()
					if err != nil {
						return
					}
					for _, f := range files {
						f.Close()
					}
					req, err := api.DecodeRequest(body)
					if err != nil {
						return
					}
					var resp api.Response
					switch {
					case errCode != "":
						resp.Error = &api.Error{Code: errCode, Message: "refused by fake"}
					case req.Call == api.CallHello:
						resp.Result, _ = json.Marshal(api.Capabilities{Version: api.Version, Helper: "fake-1", Backends: []string{"qemu"}, Accel: sandbox.AccelTCG,
							Landlock: api.Landlock{ABI: 7, PinnedABI: 7, Enforced: true, Mode: api.LandlockEnforced},
							Peer:     api.Peer{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), PID: 42}, Policy: "none"})
					case req.Call == api.CallDoctor:
						resp.Result, _ = json.Marshal(api.DoctorReport{Checks: []api.Check{{Name: "kvm", OK: false, Detail: "/dev/kvm missing"},
							{Name: "accel", OK: true, Warn: true, Detail: "tcg: WARNING: KVM is not usable"}}})
					}
					out, _ := json.Marshal(resp)
					if c.WriteFrame(out) != nil {
						return
					}
				}
			}()
		}
	}()
	return sock
}

func doctorOutput(t *testing.T, sock string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := runDoctor(ctx, &out, sock)
	return out.String(), err
}

func TestDoctorReportsHelper(t *testing.T) {
	out, err := doctorOutput(t, fakeHelper(t, ""))
	if !errors.Is(err, ErrDoctorFailed) || !strings.Contains(err.Error(), "1 check(s) failed") {
		t.Errorf("a FAIL check: err = %v, want ErrDoctorFailed", err) // doctor exits 1
	}
	for _, want := range []string{"fake-1", "protocol 1", "qemu (accel tcg)", "landlock:       enforced (kernel ABI 7, pinned ABI 7)",
		"(as seen by the helper via SO_PEERCRED)", "[FAIL] kvm", "/dev/kvm missing", "[warn] accel", "tcg: WARNING"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// withSystemd makes helperHint see systemd as PID 1 or not.
func withSystemd(t *testing.T, booted bool) {
	old := systemdBooted
	systemdBooted = func() bool { return booted }
	t.Cleanup(func() { systemdBooted = old })
}

func TestDoctorHints(t *testing.T) {
	withSystemd(t, true)
	for _, tc := range []struct {
		name string
		sock string
		want string
	}{
		{"socket missing", filepath.Join(t.TempDir(), "none.sock"), "systemctl enable --now broodd-helper.socket"},
		{"permission denied", fakeHelper(t, api.CodePermissionDenied), "usermod -aG brood"},
		{"version mismatch", fakeHelper(t, api.CodeVersionMismatch), "different versions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := doctorOutput(t, tc.sock)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want hint %q", err, tc.want)
			}
		})
	}
	// Through the command line: exit code 1 and the hint on stderr.
	t.Setenv(api.SocketEnv, filepath.Join(t.TempDir(), "none.sock"))
	if code := Main([]string{"doctor"}); code != ExitError {
		t.Errorf("brood doctor without helper exits %d, want %d", code, ExitError)
	}
}

func TestHelperHint(t *testing.T) {
	withSystemd(t, true)
	dial := func(errno error) error {
		return &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", errno)}
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{dial(unix.ENOENT), "systemctl enable --now broodd-helper.socket"},
		{dial(unix.ECONNREFUSED), "systemctl enable --now broodd-helper.socket"},
		{dial(unix.EACCES), "usermod -aG brood"},
		{&api.Error{Code: api.CodePermissionDenied}, "usermod -aG brood"},
		{context.DeadlineExceeded, "did not answer in time"},
		{errors.New("other"), "journalctl -u broodd-helper.service"},
	} {
		if got := helperHint(tc.err, "/run/brood/helper.sock"); !strings.Contains(got, tc.want) {
			t.Errorf("helperHint(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestHelperHintWithoutSystemd: where systemd is not PID 1 the hint does not send the
// developer to systemctl but to install.sh or a background helper.
func TestHelperHintWithoutSystemd(t *testing.T) {
	withSystemd(t, false)
	err := &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", unix.ECONNREFUSED)}
	got := helperHint(err, "/run/brood/helper.sock")
	for _, want := range []string{"sudo ./scripts/install.sh", "sudo broodd-helper --listen /run/brood/helper.sock &", "/run/systemd/system"} {
		if !strings.Contains(got, want) {
			t.Errorf("hint lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "systemctl") {
		t.Errorf("hint names systemctl without systemd:\n%s", got)
	}
}

// TestDoctorVersionCheck: doctor compares brood's build version with the helper's (Hello's
// Helper field) and warns, naming both, when they differ; a match is an ok line.
func TestDoctorVersionCheck(t *testing.T) {
	for _, tc := range []struct {
		name, helper string
		want         string
		warn         bool
	}{
		{"match", version.String(), "[ok  ] version           brood and broodd-helper are both " + version.String(), false},
		{"mismatch", "v0.0.1-stale", "[warn] version           brood is " + version.String() + " but broodd-helper is v0.0.1-stale", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHelper(t)
			f.Caps.Helper = tc.helper
			f.Doctor = api.DoctorReport{Checks: []api.Check{{Name: "kvm", OK: true, Detail: "/dev/kvm usable"}}}
			out, err := doctorOutput(t, os.Getenv(api.SocketEnv))
			if err != nil {
				t.Fatalf("doctor: %v\n%s", err, out) // a warning is not a failure
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
			if got := strings.Contains(out, "[warn]"); got != tc.warn {
				t.Errorf("a [warn] line: %v, want %v:\n%s", got, tc.warn, out)
			}
		})
	}
}
