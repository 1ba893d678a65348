//go:build linux

package helper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"

	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/sandbox/image"
	"brood.dev/brood/sandbox/ociref"
)

// fakeUnits records the calls a unitBuilder makes to systemd and answers every job with
// result.
type fakeUnits struct {
	result string

	mu      sync.Mutex
	started []string
	props   [][]sddbus.Property
	modes   []string
	stopped []string
	closed  int
}

func (f *fakeUnits) StartTransientUnitContext(_ context.Context, name, mode string, props []sddbus.Property, ch chan<- string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started, f.props, f.modes = append(f.started, name), append(f.props, props), append(f.modes, mode)
	ch <- f.result
	return 1, nil
}

func (f *fakeUnits) StopUnitContext(_ context.Context, name, mode string, _ chan<- string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, name+" "+mode)
	return 2, nil
}

func (f *fakeUnits) Close() { f.mu.Lock(); f.closed++; f.mu.Unlock() }

func newFakeUnitBuilder(f *fakeUnits) *unitBuilder {
	return &unitBuilder{exe: "/usr/sbin/broodd-helper", recipes: recipeNames(),
		connect: func(context.Context) (systemdUnits, error) { return f, nil }}
}

// propMap returns props by name, failing on a name given twice.
func propMap(t *testing.T, props []sddbus.Property) map[string]any {
	t.Helper()
	m := map[string]any{}
	for _, p := range props {
		if _, dup := m[p.Name]; dup {
			t.Errorf("property %s given twice", p.Name)
		}
		m[p.Name] = p.Value.Value()
	}
	return m
}

// execStartArgv reads ExecStart's one command (go-systemd's execStart: Path, Args,
// UncleanIsFailure) as its argv.
func execStartArgv(t *testing.T, v any) (path string, argv []string) {
	t.Helper()
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice || rv.Len() != 1 {
		t.Fatalf("ExecStart %#v: want one command", v)
	}
	c := rv.Index(0)
	return c.FieldByName("Path").String(), c.FieldByName("Args").Interface().([]string)
}

// TestBuildUnitProperties: a recipe build and a pull each start one transient unit
// brood-build-<id>.service (mode "fail") with exactly these properties: the helper's own
// executable as ExecStart with `image-build --progress-fd 1` and the checked request's
// arguments, root with exactly buildUnitCapabilities as bounding and ambient set, the
// progress pipe as StandardOutputFileDescriptor (a D-Bus unix fd, 'h'), stderr to the
// journal, NoNewPrivileges, PrivateTmp, ProtectHome, a RuntimeMaxSec deadline and
// CollectMode inactive-or-failed. Stop stops that unit.
func TestBuildUnitProperties(t *testing.T) {
	wantCaps := "cap_chown,cap_dac_override,cap_fowner,cap_fsetid,cap_kill,cap_setgid,cap_setuid,cap_mknod,cap_sys_chroot,cap_sys_admin,cap_setfcap"
	var names []string
	for _, v := range buildUnitCapabilities {
		names = append(names, v.String())
	}
	slices.SortFunc(names, func(a, b string) int { return strings.Index(wantCaps, a) - strings.Index(wantCaps, b) })
	if got := strings.Join(names, ","); got != wantCaps {
		t.Fatalf("buildUnitCapabilities = %s, want exactly %s", got, wantCaps)
	}
	key, err := image.Recipes["test"].Key()
	if err != nil {
		t.Fatal(err)
	}
	ref := "127.0.0.1:5000/tool@sha256:" + strings.Repeat("0f", 32)
	refSum := sha256.Sum256([]byte(ref))
	for _, tc := range []struct {
		req      spawner.Request
		unit     string
		wantArgs []string
	}{
		{spawner.Request{Name: "test", StateDir: "/var/lib/brood"}, "brood-build-" + key[:12] + ".service",
			[]string{"/usr/sbin/broodd-helper", "image-build", "--progress-fd", "1", "--state-dir", "/var/lib/brood", "test"}},
		{spawner.Request{Ref: ref, Policy: "/etc/brood/policy.toml", StateDir: "/var/lib/brood"}, "brood-build-" + hex.EncodeToString(refSum[:6]) + ".service",
			[]string{"/usr/sbin/broodd-helper", "image-build", "--progress-fd", "1", "--state-dir", "/var/lib/brood", "--policy", "/etc/brood/policy.toml", "--ref", ref}},
	} {
		f := &fakeUnits{result: "done"}
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		child, err := newFakeUnitBuilder(f).Build(tc.req, w)
		if err != nil {
			t.Fatalf("Build %+v: %v", tc.req, err)
		}
		if len(f.started) != 1 || f.modes[0] != "fail" || !strings.HasPrefix(f.started[0], "brood-build-") || !strings.HasSuffix(f.started[0], ".service") ||
			f.started[0] != tc.unit || child.ID != "unit "+f.started[0] {
			t.Fatalf("units started %v modes %v (child %q), want one %s in mode fail", f.started, f.modes, child.ID, tc.unit)
		}
		p := propMap(t, f.props[0])
		names := slices.Sorted(func(yield func(string) bool) {
			for n := range p {
				if !yield(n) {
					return
				}
			}
		})
		want := []string{"AmbientCapabilities", "CapabilityBoundingSet", "CollectMode", "Description", "ExecStart", "NoNewPrivileges", "PrivateTmp",
			"ProtectHome", "RuntimeMaxUSec", "StandardError", "StandardInput", "StandardOutputFileDescriptor", "Type"}
		if !slices.Equal(names, want) {
			t.Errorf("properties %v, want exactly %v", names, want)
		}
		path, argv := execStartArgv(t, p["ExecStart"])
		if path != "/usr/sbin/broodd-helper" || !slices.Equal(argv, tc.wantArgs) {
			t.Errorf("ExecStart %s %q, want %q", path, argv, tc.wantArgs)
		}
		mask := capMask(buildUnitCapabilities)
		if p["CapabilityBoundingSet"] != mask || p["AmbientCapabilities"] != mask {
			t.Errorf("capabilities bounding %#x ambient %#x, want %#x", p["CapabilityBoundingSet"], p["AmbientCapabilities"], mask)
		}
		if fd, ok := p["StandardOutputFileDescriptor"].(godbus.UnixFD); !ok || uintptr(fd) != w.Fd() {
			t.Errorf("StandardOutputFileDescriptor %#v, want godbus.UnixFD(%d)", p["StandardOutputFileDescriptor"], w.Fd())
		}
		for n, v := range map[string]any{"NoNewPrivileges": true, "PrivateTmp": true, "ProtectHome": "yes", "StandardInput": "null", "StandardError": "journal",
			"CollectMode": "inactive-or-failed", "Type": "exec", "RuntimeMaxUSec": uint64(buildChildTimeout.Microseconds())} {
			if p[n] != v {
				t.Errorf("%s = %#v, want %#v", n, p[n], v)
			}
		}
		child.Stop()
		if !slices.Equal(f.stopped, []string{f.started[0] + " replace"}) || f.closed != 2 {
			t.Errorf("after Stop: stopped %v, %d connections closed; want %s stopped, 2 closed", f.stopped, f.closed, f.started[0])
		}
		r.Close()
		w.Close()
	}
}

// TestBuildUnitRefused: a request the spawner would refuse (a name outside the compiled
// recipe table, a tag, a relative state directory) starts no unit; a job that does not
// end "done" is an error naming the unit.
func TestBuildUnitRefused(t *testing.T) {
	f := &fakeUnits{result: "done"}
	for _, req := range []spawner.Request{{Name: "nosuch", StateDir: "/var/lib/brood"}, {Name: "../x", StateDir: "/var/lib/brood"},
		{Ref: "127.0.0.1:5000/tool:v1", Policy: "/etc/brood/policy.toml", StateDir: "/var/lib/brood"}, {Name: "test", StateDir: "var"}} {
		if _, err := newFakeUnitBuilder(f).Build(req, os.Stdout); !errors.Is(err, spawner.ErrSpawn) {
			t.Errorf("Build %+v: %v, want refused (ErrSpawn)", req, err)
		}
	}
	if len(f.started) != 0 {
		t.Errorf("refused requests started units %v", f.started)
	}
	f.result = "failed"
	_, err := newFakeUnitBuilder(f).Build(spawner.Request{Name: "test", StateDir: "/var/lib/brood"}, os.Stdout)
	if err == nil || !strings.Contains(err.Error(), "start transient unit brood-build-") || !strings.Contains(err.Error(), "job failed") {
		t.Errorf("failed job: %v, want an error naming the unit and the job result", err)
	}
}

// TestBuildChildProgressStdout: the build child started as systemd starts it
// (`image-build --progress-fd 1`, the progress pipe as its standard output) writes only
// progress records there, ending with the final one, while its log (with its capability
// sets and cgroup first) goes to the store's build log.
func TestBuildChildProgressStdout(t *testing.T) {
	requireRoot(t)
	state := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A pull that fails at once (this test binary is not where the unpacker, running as
	// nobody, may exec it).
	ref := "127.0.0.1:1/tool@sha256:" + strings.Repeat("0f", 32)
	cmd := exec.Command(self, spawner.BuildSubcommand, "--progress-fd", "1", "--state-dir", state, "--policy", filepath.Join(state, "nosuch.toml"), "--ref", ref)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var phases []string
	final, err := readBuildRecords(out, func(r buildRecord) { phases = append(phases, r.Phase) })
	cmd.Wait()
	if err != nil || final.Phase != phaseFailed || !strings.Contains(final.Error, "image pull "+ref) || !slices.Equal(phases, []string{"start", "pull"}) {
		t.Fatalf("records %v then %+v (%v): want start, pull, then failed naming the pull", phases, final, err)
	}
	name, _ := ociref.RefImageName(ref)
	log, err := os.ReadFile(storeOf(&Config{StateDir: state}).BuildLog(name))
	if err != nil || !strings.HasPrefix(string(log), "broodd-helper: build child: bounding ") || !strings.Contains(string(log), "; cgroup ") ||
		!strings.Contains(string(log), "image pull "+ref) {
		t.Errorf("build log %q (%v): want the child's identity first, then its error", log, err)
	}
}
