//go:build linux

package helper

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	stdlog "log"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox/image"
	"brood.dev/brood/sandbox/ociref"
	"brood.dev/brood/sandbox/store"
	"brood.dev/brood/sandbox/vmtest"
)

// tinyRecipe is a recipe only the test binary knows (addTinyRecipe): busybox-static
// unpacked by mmdebstrap's extract variant (~1 MiB from the Debian archive, ~15 s), so
// that a real build through the helper is quick. A production binary has no such entry:
// its recipes are the literal table image.Recipes.
const tinyRecipe = "ondemand-tiny"

// addTinyRecipe registers tinyRecipe in this process's recipe table: the test process
// (the helper under test) and its re-executed spawner and build children.
func addTinyRecipe() {
	image.Recipes[tinyRecipe] = image.Recipe{Name: tinyRecipe, Suite: "bookworm", Variant: "extract",
		Include: []string{"busybox-static"}}
}

// TestVMOnDemandBuild: a real on-demand build through the helper socket. The server
// under test is this process's helper Server with the real spawner (the test binary
// re-executed as vm-spawn, outside any namespace, so mmdebstrap reaches the Debian
// archive as `broodd-helper image build` does) and the real build child (image-build):
// the kernel is hard-linked from vmtest's, the initramfs and the image are built into a
// temporary store. Two clients of different non-root uids in the allowed group ask for
// the same recipe at once: one build runs (counted by the server), both get its image,
// with progress. A uid outside the group is refused; with on_demand_builds = false in the
// system policy the same request is a policy error and nothing is built.
func TestVMOnDemandBuild(t *testing.T) {
	a := vmtest.Get(t)
	addTinyRecipe()
	t.Cleanup(func() { delete(image.Recipes, tinyRecipe) })
	base := publicTempDir(t)
	l := store.New(filepath.Join(base, "state"))
	if err := os.MkdirAll(l.Kernels(), 0o755); err != nil {
		t.Fatal(err)
	}
	if o, err := exec.Command("cp", "-al", a.Kernel.Dir, l.Kernels()).CombinedOutput(); err != nil {
		t.Fatalf("link kernel: %v: %s", err, o)
	}
	os.RemoveAll(l.Initramfs(a.Kernel.Release))
	bin := publicTestBinary(t)
	// The build child finds brood-guest next to its executable (assets.FindGuest).
	if _, err := os.Stat(filepath.Join(filepath.Dir(bin), "brood-guest")); err != nil {
		if _, err := vmtest.BuildGuest(t.Context(), filepath.Dir(bin)); err != nil {
			t.Fatal(err)
		}
	}
	ts, sp, policy, gid := buildingServer(t, base, l)

	// 1. Two uids of the group at once: one build, one image, progress for both.
	t0 := time.Now()
	var wg sync.WaitGroup
	res := make([]childResult, 2)
	for i, uid := range []uint32{4242, 4243} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cred := &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{gid}}
			res[i] = runChildClient(t, cred, childSpec{Sock: ts.sock, Ops: []childOp{{Op: "hello"}, {Op: "build", Name: tinyRecipe}}})[1]
		}()
	}
	wg.Wait()
	took := time.Since(t0)
	key, _ := image.Recipes[tinyRecipe].Key()
	want := store.ImageFile(tinyRecipe, key[:store.DigestLen])
	for i, r := range res {
		if r.Code != "" || r.Build == nil || r.Build.State != api.BuildDone || r.Build.File != want {
			t.Fatalf("client %d: %+v (%s)\nbuild log:\n%s", i, r, r.Err, readLog(l.BuildLog(tinyRecipe)))
		}
	}
	if n := ts.srv.builds.started.Load(); n != 1 {
		t.Errorf("%d builds started for two callers of one recipe, want 1", n)
	}
	if _, ok := ts.srv.storedImage(&build{name: tinyRecipe, key: key[:store.DigestLen]}); !ok {
		t.Errorf("the store has no image %s", want)
	}
	log := readLog(l.BuildLog(tinyRecipe))
	if fi, err := os.Stat(l.BuildLog(tinyRecipe)); err != nil || fi.Mode().Perm() != 0o644 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("build log: %v, %v; want root's, mode 0644", fi.Mode(), err)
	}
	if strings.Count(log, "I: success in") != 1 {
		t.Errorf("build log shows %d mmdebstrap runs, want 1:\n%s", strings.Count(log, "I: success in"), log)
	}
	starter := res[0]
	if res[1].Records > starter.Records {
		starter = res[1]
	}
	if strings.Join(starter.Phases, ",") != "start,kernel,initramfs,image,verify" {
		t.Errorf("phases seen by the starter: %v, want start,kernel,initramfs,image,verify", starter.Phases)
	}
	// At most one count record a second, plus the five phases.
	if limit := int(took/time.Second) + 1 + 5; starter.Records > limit {
		t.Errorf("%d progress records in %s, want at most %d", starter.Records, took, limit)
	}
	t.Logf("on-demand build of %s: %s; progress records seen %d and %d, answers %d and %d, joined %v and %v",
		tinyRecipe, took.Round(time.Second), res[0].Records, res[1].Records, res[0].Answers, res[1].Answers, res[0].Joined, res[1].Joined)

	// 2. The real spawner refuses a name outside its recipe table and a relative store.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for _, bad := range []spawner.Request{{Name: "nosuch", StateDir: l.Root}, {Name: "../" + tinyRecipe, StateDir: l.Root},
		{Name: tinyRecipe, StateDir: "state"}, {Ref: "-x@sha256:" + strings.Repeat("0", 64), Policy: policy, StateDir: l.Root}} {
		if _, _, err := sp.Build(bad, w); err == nil || !strings.Contains(err.Error(), "not") {
			t.Errorf("spawner build %+v: %v, want refused", bad, err)
		}
	}

	// 3. A uid outside the allowed group is refused before any call is answered.
	out := runChildClient(t, &syscall.Credential{Uid: 4244, Gid: 4244, Groups: []uint32{}},
		childSpec{Sock: ts.sock, Ops: []childOp{{Op: "hello"}, {Op: "build", Name: tinyRecipe}}})
	if out[0].Code != string(api.CodePermissionDenied) {
		t.Errorf("outsider: %+v, want permission_denied", out)
	}

	// 4. on_demand_builds = false: the policy error, no build (the recipe's image is
	// removed first, so only the policy stands between the request and a build).
	os.Remove(filepath.Join(l.Images(), want))
	if err := os.WriteFile(policy, []byte("[images]\non_demand_builds = false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out = runChildClient(t, &syscall.Credential{Uid: 4242, Gid: 4242, Groups: []uint32{gid}},
		childSpec{Sock: ts.sock, Ops: []childOp{{Op: "hello"}, {Op: "build", Name: tinyRecipe}}})
	if out[1].Code != string(api.CodePolicy) || !strings.Contains(out[1].Err, "on_demand_builds = false") ||
		!strings.Contains(out[1].Err, "sudo broodd-helper image build "+tinyRecipe) {
		t.Errorf("build under on_demand_builds = false: %+v", out[1])
	}
	if n := ts.srv.builds.started.Load(); n != 1 {
		t.Errorf("builds started after the refusal: %d, want still 1", n)
	}
}

// buildingServer starts this process's helper Server on the store l with the real
// spawner (the public test binary re-executed as vm-spawn) as its builder, admitting
// the group allowedTestGroup, with the system policy file base/policy.toml (absent at
// first). The spawner, and so every build child, runs as a build unit's child would:
// bounding set exactly buildUnitCapabilities, no_new_privs (boundedExe), so the real
// builds and pulls of these tests show that set suffices.
func buildingServer(t *testing.T, base string, l store.Layout) (*testServer, *spawner.Client, string, uint32) {
	t.Helper()
	sp, err := spawner.Start(boundedExe(t, base, publicTestBinary(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.Close)
	gid := allowedTestGroup(t)
	policy := filepath.Join(base, "policy.toml")
	ts := startServerWith(t, func(c *Config) {
		c.StateDir, c.Egress.PolicyPath, c.AllowUIDs, c.AllowGroup, c.AllowGIDs = l.Root, policy, nil, "", []uint32{gid}
	}, func(s *Server) { s.EnableBuilds(spawnerBuilder{sp}) })
	return ts, sp, policy, gid
}

// boundedExe writes base/bounded-helper, a script that execs bin with its arguments
// under setpriv(1) with the bounding set reduced to buildUnitCapabilities, no inheritable
// capabilities and no_new_privs: the conditions buildUnitProperties asks systemd for.
func boundedExe(t *testing.T, base, bin string) string {
	t.Helper()
	setpriv := testenv.RequireCommand(t, "setpriv")
	caps := []string{"-all"}
	for _, v := range buildUnitCapabilities {
		caps = append(caps, "+"+strings.TrimPrefix(v.String(), "cap_"))
	}
	script := filepath.Join(base, "bounded-helper")
	body := fmt.Sprintf("#!/bin/sh\nexec %s --bounding-set=%s --inh-caps=-all --no-new-privs %s \"$@\"\n", setpriv, strings.Join(caps, ","), bin)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// TestVMOnDemandPull: a real on-demand pull through the helper socket and the real
// spawner: an image of two files pushed to a registry on 127.0.0.1 is pulled by its
// digest reference for a non-root uid of the allowed group (the build child running
// `image pull`'s code, its unpacker as uid 65534) into the store under the name the
// reference maps to, with allowed_images naming the registry. allowed_images naming
// another registry refuses the same request.
func TestVMOnDemandPull(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "mkfs.erofs")
	base := publicTempDir(t)
	l := store.New(filepath.Join(base, "state"))
	ts, _, policy, gid := buildingServer(t, base, l)
	ref := pushTinyImage(t)
	n, err := ociref.RefImageName(ref)
	if err != nil {
		t.Fatal(err)
	}
	registryHost, _, _ := strings.Cut(ref, "/")
	if err := os.WriteFile(policy, []byte(fmt.Sprintf("[images]\nallowed_images = [%q]\n", registryHost)), 0o644); err != nil {
		t.Fatal(err)
	}
	cred := &syscall.Credential{Uid: 4242, Gid: 4242, Groups: []uint32{gid}}
	t0 := time.Now()
	out := runChildClient(t, cred, childSpec{Sock: ts.sock, Ops: []childOp{{Op: "hello"}, {Op: "pull", Name: ref}}})
	r := out[1]
	if r.Code != "" || r.Build == nil || r.Build.State != api.BuildDone || r.Build.Name != n || !strings.HasPrefix(r.Build.File, n+"-") {
		t.Fatalf("pull: %+v (%s)\nlog:\n%s", r, r.Err, readLog(l.BuildLog(n)))
	}
	if strings.Join(r.Phases, ",") != "start,pull" {
		t.Errorf("phases %v, want start,pull", r.Phases)
	}
	imgs, err := l.ListImages()
	if err != nil || len(imgs) != 1 || imgs[0].Name != n {
		t.Errorf("store after the pull: %+v, %v", imgs, err)
	}
	t.Logf("on-demand pull of %s: %s, %d progress records", ref, time.Since(t0).Round(time.Millisecond), r.Records)
	os.RemoveAll(l.Images())
	if err := os.WriteFile(policy, []byte("[images]\nallowed_images = [\"ghcr.io/corp\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out = runChildClient(t, cred, childSpec{Sock: ts.sock, Ops: []childOp{{Op: "hello"}, {Op: "pull", Name: ref}}})
	if out[1].Code != string(api.CodePolicy) || !strings.Contains(out[1].Err, "allowed_images") {
		t.Errorf("pull outside allowed_images: %+v", out[1])
	}
	if n := ts.srv.builds.started.Load(); n != 1 {
		t.Errorf("%d build children started, want 1", n)
	}
}

// pushTinyImage pushes a one-layer image (bin/hello and etc/os-release) to a registry
// served on 127.0.0.1 for the test and returns its digest reference.
func pushTinyImage(t *testing.T) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range map[string]string{"bin/hello": "#!/bin/sh\necho hello\n", "etc/os-release": "ID=tiny\n"} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
	}
	tw.Close()
	srv := httptest.NewServer(registry.New(registry.Logger(stdlog.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	return host + "/tiny@" + pushImage(t, host, "tiny", buf.Bytes())
}

// allowedTestGroup returns the gid of group brood when the host has it (the group an
// install creates), else 4343: the clients get it as a supplementary group either way.
func allowedTestGroup(t *testing.T) uint32 {
	if g, err := user.LookupGroup("brood"); err == nil {
		if gid, err := strconv.Atoi(g.Gid); err == nil {
			return uint32(gid)
		}
	}
	return 4343
}

func readLog(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// TestOnDemandBuildFailure: a real build child (the real spawner, this process's
// Server) that fails (the store's kernels entry is a file, so the guest kernel cannot be
// stored) comes back as a failed build with the last lines of the build log and the log's
// path, a root-owned file of mode 0644 in the store.
func TestOnDemandBuildFailure(t *testing.T) {
	requireRoot(t)
	base := publicTempDir(t)
	l := store.New(filepath.Join(base, "state"))
	if err := os.MkdirAll(l.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.Kernels(), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ts, _, _, gid := buildingServer(t, base, l)
	out := runChildClient(t, &syscall.Credential{Uid: 4242, Gid: 4242, Groups: []uint32{gid}},
		childSpec{Sock: ts.sock, Ops: []childOp{{Op: "hello"}, {Op: "build", Name: "test"}}})
	r := out[1]
	log := l.BuildLog("test")
	if r.Build == nil || r.Build.State != api.BuildFailed || len(r.Build.Tail) == 0 || r.Build.Log != log ||
		!strings.Contains(r.Err, "full log: "+log) || !strings.Contains(r.Build.Error, "image build test") {
		t.Fatalf("failing build: %+v (%s)", r, r.Err)
	}
	fi, err := os.Stat(log)
	if err != nil || fi.Mode().Perm() != 0o644 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("build log %s: %v, %v", log, fi, err)
	}
	if last := r.Build.Tail[len(r.Build.Tail)-1]; !strings.Contains(readLog(log), last) {
		t.Errorf("tail line %q is not in the log:\n%s", last, readLog(log))
	}
	t.Logf("failed build: %s; tail %d lines, phases %v, %d records", r.Build.Error, len(r.Build.Tail), r.Phases, r.Records)
}

// TestOnDemandBuildConfinedHelper: the helper binary itself (Run: its capability set
// reduced to the unit's, Landlock enforced) answers build_image for a recipe and for a
// digest reference with unavailable, naming the capabilities a build lacks and the
// command an administrator runs, and starts nothing: mmdebstrap cannot work with the
// unit's capabilities (no CAP_SYS_ADMIN to mount, no CAP_SYS_CHROOT, no CAP_DAC_OVERRIDE).
func TestOnDemandBuildConfinedHelper(t *testing.T) {
	requireRoot(t)
	base := publicTempDir(t)
	state := filepath.Join(base, "state")
	policy := filepath.Join(base, "policy.toml")
	if err := os.WriteFile(policy, []byte("[images]\nallowed_images = [\"127.0.0.1:5000\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, base, fmt.Sprintf("state_dir = %q\nallow_uids = [4242]\n[egress]\npolicy_path = %q\n", state, policy))
	sock := filepath.Join(base, "helper.sock")
	hc := startHelperChild(t, nil, nil, "--config", cfg, "--runtime-dir", filepath.Join(base, "run"), "--listen", sock, "--idle-timeout", "0")
	c := waitDial(t, hc, sock, 20*time.Second)
	if c.Caps.Landlock.Mode != api.LandlockEnforced {
		t.Fatalf("helper under test is not confined: %+v", c.Caps.Landlock)
	}
	c.Close()
	chmod(t, sock, 0o666)
	ref := "127.0.0.1:5000/tool@sha256:" + strings.Repeat("0f", 32)
	out := runChildClient(t, &syscall.Credential{Uid: 4242, Gid: 4242, Groups: []uint32{}},
		childSpec{Sock: sock, Ops: []childOp{{Op: "hello"}, {Op: "build", Name: "test"}, {Op: "pull", Name: ref}}})
	for i, want := range []string{"CAP_SYS_ADMIN, CAP_SYS_CHROOT, CAP_MKNOD, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_SETFCAP", "CAP_DAC_OVERRIDE, CAP_FOWNER"} {
		r := out[i+1]
		if r.Code != string(api.CodeUnavailable) || !strings.Contains(r.Err, want) || !strings.Contains(r.Err, "an administrator runs: sudo broodd-helper image") {
			t.Errorf("request %d in the unit's capability set: %+v, want unavailable naming %s", i, r, want)
		}
	}
	if strings.Contains(hc.stderr.String(), "image build started") {
		t.Errorf("a build child was started:\n%s", hc.stderr.String())
	}
}
