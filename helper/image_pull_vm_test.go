//go:build linux

package helper

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox/ociref"
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
	l := linkedStore(t, a, base) // the kernel and initramfs
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
	ref := host + "/test@" + pushImage(t, host, "test", layerTar)
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
	c, id := bootImage(t, startStoreHelper(t, cfg, base), base, pulledName, "pulled image")
	c.must(vmCmd{Op: "close"})
	c.must(vmCmd{Op: "wait", ID: id})
	c.must(vmCmd{Op: "destroy", ID: id})
}
