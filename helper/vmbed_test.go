//go:build linux

package helper

// What the store, build and pull tests share: a temporary store holding vmtest's kernel, a
// one-layer image pushed to a registry on 127.0.0.1, a helper child serving a
// configuration, and a boot of an image in it checked from inside the guest.

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"brood.dev/brood/sandbox/assets"
	"brood.dev/brood/sandbox/store"
)

// linkedStore returns a store at base/state whose kernels directory holds a's kernel (and
// what lies beside it), hard-linked: fetching a kernel is not what these tests test.
func linkedStore(t *testing.T, a *assets.Set, base string) store.Layout {
	t.Helper()
	l := store.New(filepath.Join(base, "state"))
	if err := os.MkdirAll(l.Kernels(), 0o755); err != nil {
		t.Fatal(err)
	}
	if o, err := exec.Command("cp", "-al", a.Kernel.Dir, l.Kernels()).CombinedOutput(); err != nil {
		t.Fatalf("link kernel: %v: %s", err, o)
	}
	return l
}

// pushImage pushes a linux/GOARCH image of the one layer layerTar (a tar stream) to the
// registry at host (host:port) as host/repo:v1 and returns its digest ("sha256:…").
func pushImage(t *testing.T, host, repo string, layerTar []byte) string {
	t.Helper()
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
	tag, err := name.ParseReference(host + "/" + repo + ":v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// serveHelper waits (up to 20 s) until helper child hc answers on sock, opens sock to
// every uid (authorization is the helper's job here, not the socket mode's) and logs the
// helper's stderr when t fails.
func serveHelper(t *testing.T, hc *helperChild, sock string) {
	t.Helper()
	waitDial(t, hc, sock, 20*time.Second).Close()
	chmod(t, sock, 0o666)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("helper log:\n%s", hc.stderr.String())
		}
	})
}

// startStoreHelper starts a helper child with the configuration file cfg, its runtime
// dir base/run and its socket base/helper.sock, served as serveHelper says.
func startStoreHelper(t *testing.T, cfg, base string) *vmHelper {
	t.Helper()
	runDir := filepath.Join(base, "run")
	sock := filepath.Join(base, "helper.sock")
	hc := startHelperChild(t, nil, nil, "--config", cfg, "--runtime-dir", runDir, "--listen", sock, "--idle-timeout", "0")
	serveHelper(t, hc, sock)
	return &vmHelper{hc: hc, sock: sock, runtime: runDir}
}

// bootImage creates a session of uid 4242 on a share base/w/snapshot (owned by 4242) with
// h, starts it on image and checks from inside the guest that the command runs as 4242
// with /bin/busybox there (what names the image in the error). It returns the client and
// the session id; the caller closes, waits and destroys.
func bootImage(t *testing.T, h *vmHelper, base, image, what string) (*vmClient, string) {
	t.Helper()
	share := ownedDir(t, ownedDir(t, base, "w", 4242, 4242), "snapshot", 4242, 4242)
	c := startVMClient(t, h.sock, 4242)
	id := c.must(vmCmd{Op: "create", Dir: share}).Session.ID
	c.must(vmCmd{Op: "start", ID: id, Image: image, Timeout: 180})
	if run := c.must(vmCmd{Op: "run", ID: id, Cmd: "id -u && test -x /bin/busybox && echo booted"}); run.Stdout != "4242\nbooted\n" {
		t.Errorf("guest output %q, want uid 4242 and busybox from the %s", run.Stdout, what)
	}
	return c, id
}
