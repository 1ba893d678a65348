//go:build linux

package helper

import (
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

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/sandbox/image"
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
	sp, err := spawner.Start(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.Close)
	gid := allowedTestGroup(t)
	policy := filepath.Join(base, "policy.toml")
	ts := startServerWith(t, func(c *Config) {
		c.StateDir, c.Egress.PolicyPath, c.AllowUIDs, c.AllowGroup, c.AllowGIDs = l.Root, policy, nil, "", []uint32{gid}
	}, func(s *Server) { s.EnableBuilds(sp) })

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
	if _, ok := ts.srv.storedImage(tinyRecipe, key[:store.DigestLen]); !ok {
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
	for _, bad := range [][2]string{{"nosuch", l.Root}, {"../" + tinyRecipe, l.Root}, {tinyRecipe, "state"}} {
		if _, _, err := sp.Build(bad[0], bad[1], w); err == nil || !strings.Contains(err.Error(), "build image") {
			t.Errorf("spawner build %q into %q: %v, want refused", bad[0], bad[1], err)
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
