//go:build linux

package helper

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox/ociref"
	"brood.dev/brood/sandbox/store"
	"brood.dev/brood/sandbox/vmtest"
)

// TestVMPulledImage: the `test` image's tree, pushed as a one-layer OCI image to a
// registry on 127.0.0.1, is pulled by REG/test@sha256:… (image pull's code, as root,
// with its unprivileged unpacker) into a temporary store, and a
// helper with that state_dir boots the pulled image under its store name and runs a
// command in it as the session owner.
func TestVMPulledImage(t *testing.T) {
	a := vmtest.Get(t)
	fsck := testenv.RequireCommand(t, "fsck.erofs")
	tarBin := testenv.RequireCommand(t, "tar")
	base := publicTempDir(t)
	l := store.New(filepath.Join(base, "state"))
	if err := os.MkdirAll(l.Kernels(), 0o755); err != nil {
		t.Fatal(err)
	}
	if o, err := exec.Command("cp", "-al", a.Kernel.Dir, l.Kernels()).CombinedOutput(); err != nil {
		t.Fatalf("link kernel and initramfs: %v: %s", err, o)
	}
	// The test image's tree as one layer.
	tree := filepath.Join(base, "tree")
	if o, err := exec.Command(fsck, "--extract="+tree, a.Image).CombinedOutput(); err != nil {
		t.Fatalf("fsck.erofs --extract: %v: %s", err, o)
	}
	layerTar, err := exec.Command(tarBin, "-C", tree, "--numeric-owner", "-cf", "-", ".").Output()
	if err != nil {
		t.Fatalf("tar the test tree: %v", err)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	tagRef, err := name.ParseReference(host + "/test:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tagRef, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	ref := host + "/test@" + d.String()
	pulledName, err := ociref.RefImageName(ref)
	if err != nil {
		t.Fatal(err)
	}

	// 1. Pull, as root, with the unprivileged unpacker (a re-executed test binary).
	cfg := writeConfig(t, base, fmt.Sprintf("state_dir = %q\nallow_uids = [4242]\n", l.Root))
	pcfg := artifactCfg(l.Root)
	pcfg.Egress.PolicyPath = filepath.Join(base, "no-policy.toml")
	unpackTestEnv, unpackTestExe = []string{childEnv + "=helper-main"}, publicTestBinary(t)
	t.Cleanup(func() { unpackTestEnv, unpackTestExe = nil, "" })
	var plog bytes.Buffer
	t0 := time.Now()
	p, err := pullImage(t.Context(), pcfg, ref, &plog)
	if err != nil {
		t.Fatalf("image pull: %v\n%s", err, plog.String())
	}
	if p.Pinned != ref || p.Name != pulledName || filepath.Dir(p.File) != l.Images() || p.Unpack.UID != unpackUID {
		t.Fatalf("pulled %+v; want %s %s in %s by uid %d", p, ref, pulledName, l.Images(), unpackUID)
	}
	t.Logf("pull of the test tree (%d MiB of tar): %s", len(layerTar)>>20, time.Since(t0).Round(time.Millisecond))

	// 2. A helper with that state_dir boots it by its store name.
	runDir := filepath.Join(base, "run")
	sock := filepath.Join(base, "helper.sock")
	hc := startHelperChild(t, nil, nil, "--config", cfg, "--runtime-dir", runDir, "--listen", sock, "--idle-timeout", "0")
	waitDial(t, hc, sock, 20*time.Second).Close()
	chmod(t, sock, 0o666)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("helper log:\n%s", hc.stderr.String())
		}
	})
	share := ownedDir(t, ownedDir(t, base, "w", 4242, 4242), "snapshot", 4242, 4242)
	c := startVMClient(t, sock, 4242)
	id := c.must(vmCmd{Op: "create", Dir: share}).Session.ID
	c.must(vmCmd{Op: "start", ID: id, Image: pulledName, Timeout: 180})
	if run := c.must(vmCmd{Op: "run", ID: id, Cmd: "id -u && test -x /bin/busybox && echo booted"}); run.Stdout != "4242\nbooted\n" {
		t.Errorf("guest output %q, want uid 4242 and busybox from the pulled image", run.Stdout)
	}
	c.must(vmCmd{Op: "close"})
	c.must(vmCmd{Op: "wait", ID: id})
	c.must(vmCmd{Op: "destroy", ID: id})
}
