package oci

import (
	"bytes"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"brood.dev/brood/sandbox/ociref"
)

// testRegistry is go-containerregistry's in-memory registry on 127.0.0.1, with a hook
// that may rewrite blob responses and a count of requests.
type testRegistry struct {
	host     string
	requests atomic.Int64
	tamper   atomic.Value // string: a blob digest whose body gets one byte flipped
}

func newRegistry(t *testing.T) *testRegistry {
	r := &testRegistry{}
	r.tamper.Store("")
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		d := r.tamper.Load().(string)
		if d == "" || req.Method != http.MethodGet || !strings.HasSuffix(req.URL.Path, "/blobs/"+d) {
			h.ServeHTTP(w, req)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		body := rec.Body.Bytes()
		body[len(body)/2] ^= 0xff
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// testImage is an image for os/arch with the given layers (tar streams, gzip-compressed
// by tarball).
func testImage(t *testing.T, arch string, layers ...[]byte) v1.Image {
	t.Helper()
	img := empty.Image
	for _, b := range layers {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// rootfsLayers is a small root filesystem in two layers: directories, files, a setuid
// binary, a symlink, a hardlink, and a whiteout and an opaque directory in the second.
func rootfsLayers(t *testing.T) [][]byte {
	su := reg("bin/su", "#!/bin/sh\n")
	su.mode = 0o4755
	return [][]byte{
		layerTar(t, dir("bin/"), reg("bin/busybox", "ELF"), hard("bin/sh", "bin/busybox"), su,
			dir("etc/"), reg("etc/os-release", "ID=test\n"), reg("etc/motd", "old"),
			dir("usr/"), dir("usr/lib/"), reg("usr/lib/old", "x"), sym("lib", "usr/lib")),
		layerTar(t, reg("etc/.wh.motd", ""), reg("usr/lib/.wh..wh..opq", ""), reg("usr/lib/new", "y"),
			dir("home/"), dir("home/agent/")),
	}
}

func push(t *testing.T, ref string, img v1.Image) v1.Hash {
	t.Helper()
	if err := remote.Write(mustRef(t, ref), img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func checkRootfs(t *testing.T, tree string) {
	t.Helper()
	for p, want := range map[string]string{"bin/busybox": "ELF", "bin/sh": "ELF", "etc/os-release": "ID=test\n", "usr/lib/new": "y"} {
		if b, err := os.ReadFile(filepath.Join(tree, p)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", p, b, err, want)
		}
	}
	for _, p := range []string{"etc/motd", "usr/lib/old"} {
		if _, err := os.Lstat(filepath.Join(tree, p)); !os.IsNotExist(err) {
			t.Errorf("%s survived its whiteout: %v", p, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(tree, "lib")); err != nil || l != "usr/lib" {
		t.Errorf("lib -> %q, %v", l, err)
	}
	if fi, err := os.Stat(filepath.Join(tree, "bin/su")); err != nil || fi.Mode() != 0o755 {
		t.Errorf("bin/su mode %v, %v; want 0755 (setuid cleared)", fi.Mode(), err)
	}
}

func TestPullByTagAndDigest(t *testing.T) {
	rg := newRegistry(t)
	img := testImage(t, runtime.GOARCH, rootfsLayers(t)...)
	d := push(t, rg.host+"/test:v1", img)

	dir := t.TempDir()
	var log strings.Builder
	p, err := Pull(t.Context(), rg.host+"/test:v1", filepath.Join(dir, "a"), Options{Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), d.String()) || !strings.Contains(log.String(), "layer 2/2 "+p.Layers[1]) {
		t.Errorf("progress log %q lacks the digest or the layers", log.String())
	}
	if p.Digest != d.String() || p.Manifest != d.String() || p.Pinned() != rg.host+"/test@"+d.String() || len(p.Layers) != 2 {
		t.Errorf("pulled %+v; want digest %s recorded", p, d)
	}
	if !hasNote(p.Report, "bin/su", "setuid") {
		t.Errorf("report %+v lacks bin/su's setuid note", p.Report)
	}
	checkRootfs(t, filepath.Join(dir, "a"))

	p2, err := Pull(t.Context(), p.Pinned(), filepath.Join(dir, "b"), Options{Policy: ociref.Policy{RequireDigests: true}})
	if err != nil || p2.Digest != d.String() {
		t.Fatalf("pull by digest: %+v, %v", p2, err)
	}
	checkRootfs(t, filepath.Join(dir, "b"))
}

// From an index, the linux/GOARCH image is pulled; the recorded digest is the index's.
func TestPullIndex(t *testing.T) {
	rg := newRegistry(t)
	mine := testImage(t, runtime.GOARCH, rootfsLayers(t)...)
	other := testImage(t, "s390x", layerTar(t, reg("s390x-only", "z")))
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "s390x"}}},
		mutate.IndexAddendum{Add: mine, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}})
	if err := remote.WriteIndex(mustRef(t, rg.host+"/multi:v1"), idx); err != nil {
		t.Fatal(err)
	}
	id, _ := idx.Digest()
	md, _ := mine.Digest()
	tree := filepath.Join(t.TempDir(), "t")
	p, err := Pull(t.Context(), rg.host+"/multi:v1", tree, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Digest != id.String() || p.Manifest != md.String() {
		t.Errorf("digest %s manifest %s; want index %s, manifest %s", p.Digest, p.Manifest, id, md)
	}
	checkRootfs(t, tree)
}

func TestPullWrongArch(t *testing.T) {
	rg := newRegistry(t)
	other := testImage(t, "s390x", layerTar(t, reg("x", "z")))
	push(t, rg.host+"/single:v1", other)
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "s390x"}}})
	if err := remote.WriteIndex(mustRef(t, rg.host+"/multi:v1"), idx); err != nil {
		t.Fatal(err)
	}
	plat := &v1.Platform{OS: "linux", Architecture: "riscv64"} // never s390x, whatever GOARCH is
	for _, ref := range []string{rg.host + "/single:v1", rg.host + "/multi:v1"} {
		tree := filepath.Join(t.TempDir(), "t")
		_, err := Pull(t.Context(), ref, tree, Options{Platform: plat})
		if !errors.Is(err, ErrPlatform) || !strings.Contains(err.Error(), "s390x") || !strings.Contains(err.Error(), ref) {
			t.Errorf("pull %s: %v; want ErrPlatform naming the reference and s390x", ref, err)
		}
		if _, err := os.Lstat(tree); !os.IsNotExist(err) {
			t.Errorf("tree created for a refused image: %v", err)
		}
	}
}

func TestPullPolicy(t *testing.T) {
	rg := newRegistry(t)
	d := push(t, rg.host+"/test:v1", testImage(t, runtime.GOARCH, rootfsLayers(t)...))
	tag := rg.host + "/test:v1"
	cases := []struct {
		name    string
		ref     string
		pol     ociref.Policy
		rule    string
		network bool // the refusal needs the resolved digest
	}{
		{"digest required", tag, ociref.Policy{RequireDigests: true}, "require_digests", false},
		{"other registry", tag, ociref.Policy{AllowedImages: []string{"ghcr.io/corp"}}, "allowed_images", false},
		{"prefix not component", tag, ociref.Policy{AllowedImages: []string{rg.host + "/tes"}}, "allowed_images", false},
		{"other digest", tag, ociref.Policy{AllowedImages: []string{"sha256:" + strings.Repeat("0", 64)}}, "allowed_images", true},
		{"digest of other repo", rg.host + "/test@" + d.String(), ociref.Policy{AllowedImages: []string{rg.host + "/other@" + d.String()}}, "allowed_images", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := rg.requests.Load()
			tree := filepath.Join(t.TempDir(), "t")
			_, err := Pull(t.Context(), c.ref, tree, Options{Policy: c.pol})
			t.Log(err)
			if !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), c.rule) || !strings.Contains(err.Error(), c.ref) {
				t.Fatalf("err = %v; want ErrPolicy naming %s and rule %s", err, c.ref, c.rule)
			}
			if got := rg.requests.Load() - n; (got > 0) != c.network {
				t.Errorf("%d registry requests; the refusal should need the network: %v", got, c.network)
			}
			if _, err := os.Lstat(tree); !os.IsNotExist(err) {
				t.Errorf("tree created for a refused image: %v", err)
			}
		})
	}
	for _, allow := range [][]string{{rg.host}, {rg.host + "/test"}, {d.String()}, {rg.host + "/test@" + d.String()}} {
		if _, err := Pull(t.Context(), tag, filepath.Join(t.TempDir(), "t"), Options{Policy: ociref.Policy{AllowedImages: allow}}); err != nil {
			t.Errorf("allowed_images %q: %v", allow, err)
		}
	}
}

// A blob whose bytes do not match its digest fails the pull before anything of it is
// unpacked, and the tree is removed.
func TestPullTamperedBlob(t *testing.T) {
	rg := newRegistry(t)
	img := testImage(t, runtime.GOARCH, rootfsLayers(t)...)
	push(t, rg.host+"/test:v1", img)
	ls, _ := img.Layers()
	ld, _ := ls[1].Digest()
	rg.tamper.Store(ld.String())
	tree := filepath.Join(t.TempDir(), "t")
	_, err := Pull(t.Context(), rg.host+"/test:v1", tree, Options{})
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), "verifying sha256") || !strings.Contains(err.Error(), ld.String()) {
		t.Fatalf("err = %v; want a digest verification error naming layer %s", err, ld)
	}
	if _, err := os.Lstat(tree); !os.IsNotExist(err) {
		t.Errorf("tree left after a failed pull: %v", err)
	}
}

// lyingLayer reports a diff ID that is not its content's.
type lyingLayer struct{ v1.Layer }

func (lyingLayer) DiffID() (v1.Hash, error) {
	return v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("1", 64)}, nil
}

func TestPullDiffIDMismatch(t *testing.T) {
	rg := newRegistry(t)
	b := layerTar(t, reg("f", "x"))
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(testImage(t, runtime.GOARCH), lyingLayer{l})
	if err != nil {
		t.Fatal(err)
	}
	push(t, rg.host+"/lie:v1", img)
	tree := filepath.Join(t.TempDir(), "t")
	if _, err := Pull(t.Context(), rg.host+"/lie:v1", tree, Options{}); !errors.Is(err, ErrDigest) {
		t.Fatalf("err = %v; want ErrDigest", err)
	}
	if _, err := os.Lstat(tree); !os.IsNotExist(err) {
		t.Errorf("tree left after a failed pull: %v", err)
	}
}

// A hostile layer pulled from a registry fails the pull naming the layer digest and the
// entry, and removes the tree.
func TestPullHostileLayer(t *testing.T) {
	rg := newRegistry(t)
	img := testImage(t, runtime.GOARCH, layerTar(t, reg("../evil", "x")))
	push(t, rg.host+"/evil:v1", img)
	ls, _ := img.Layers()
	ld, _ := ls[0].Digest()
	s := newSite(t)
	_, err := Pull(t.Context(), rg.host+"/evil:v1", s.tree, Options{})
	var ee *EntryError
	if !errors.As(err, &ee) || ee.Layer != ld.String() || ee.Entry != "../evil" || !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("err = %v; want an EntryError for layer %s entry ../evil", err, ld)
	}
	s.untouched(t)
	if _, err := os.Lstat(s.tree); !os.IsNotExist(err) {
		t.Errorf("tree left after a failed pull: %v", err)
	}
}

// Layers compressed with zstd, and uncompressed ones, unpack like gzip ones.
func TestPullCompressions(t *testing.T) {
	rg := newRegistry(t)
	ls := rootfsLayers(t)
	z, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(ls[0])), nil },
		tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
	if err != nil {
		t.Fatal(err)
	}
	plain := static.NewLayer(ls[1], types.OCIUncompressedLayer)
	img, err := mutate.AppendLayers(testImage(t, runtime.GOARCH), z, plain)
	if err != nil {
		t.Fatal(err)
	}
	push(t, rg.host+"/comp:v1", img)
	tree := filepath.Join(t.TempDir(), "t")
	if _, err := Pull(t.Context(), rg.host+"/comp:v1", tree, Options{}); err != nil {
		t.Fatal(err)
	}
	checkRootfs(t, tree)
}
