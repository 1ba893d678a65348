//go:build linux

package helper

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"brood.dev/brood/helper/landlockabi"
	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/sandbox/ociref"
	"brood.dev/brood/sandbox/store"
)

// pullFixture is a registry on 127.0.0.1 holding one small image as REG/test:v1, and a
// helper configuration whose store and system policy are the test's.
type pullFixture struct {
	cfg    *Config
	host   string
	digest string
}

func newPullFixture(t *testing.T, policy string) *pullFixture {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "mkfs.erofs")
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644, Size: 8},
		{Name: "home/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "home/agent/", Typeflag: tar.TypeDir, Mode: 0o755, Uid: 123456, Gid: 123456},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte("ID=test\n"))
		}
	}
	tw.Close()
	digest := pushImage(t, host, "test", buf.Bytes())
	cfg := artifactCfg(filepath.Join(t.TempDir(), "state"))
	cfg.Egress.PolicyPath = filepath.Join(t.TempDir(), "policy.toml")
	policy = strings.ReplaceAll(policy, "DIGEST", digest)
	if err := os.WriteFile(cfg.Egress.PolicyPath, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	unpackTestEnv, unpackTestExe = []string{childEnv + "=helper-main"}, publicTestBinary(t)
	t.Cleanup(func() { unpackTestEnv, unpackTestExe = nil, "" })
	return &pullFixture{cfg: cfg, host: host, digest: digest}
}

// TestImagePull: a tag is pulled by the unprivileged, confined unpacker (it reports
// uid 65534, no_new_privs and the Landlock ABI from inside), the answer pins the
// digest, the image keeps the layer's owners with a root-owned root, and no work
// directory is left; the digest reference then maps to the same store name offline.
func TestImagePull(t *testing.T) {
	f := newPullFixture(t, "")
	var logb bytes.Buffer
	p, err := pullImage(t.Context(), f.cfg, f.host+"/test:v1", &logb)
	if err != nil {
		t.Fatalf("pull: %v\n%s", err, logb.String())
	}
	if want := f.host + "/test@" + f.digest; p.Pinned != want {
		t.Errorf("pinned %s, want %s", p.Pinned, want)
	}
	if n, err := ociref.RefImageName(p.Pinned); err != nil || n != p.Name {
		t.Errorf("RefImageName(%s) = %s, %v; want %s", p.Pinned, n, err, p.Name)
	}
	u := p.Unpack
	if u.UID != unpackUID || u.GID != unpackUID || !u.NoNewPrivs {
		t.Errorf("unpacker ran as uid %d gid %d no_new_privs %v; want %d, %d, true", u.UID, u.GID, u.NoNewPrivs, unpackUID, unpackUID)
	}
	if abi, err := landlockabi.Kernel(); err == nil && u.Landlock != min(abi, landlockabi.Pinned) {
		t.Errorf("unpacker Landlock ABI %d, kernel has %d", u.Landlock, abi)
	}
	images := storeOf(f.cfg).Images()
	if n, _, ok := store.ParseImageFile(filepath.Base(p.File)); !ok || n != p.Name || filepath.Dir(p.File) != images {
		t.Errorf("image file %s, want %s/%s-...", p.File, images, p.Name)
	}
	if ents, _ := os.ReadDir(images); len(ents) != 1 {
		t.Errorf("images dir holds %v; want only the image", ents)
	}
	fsck := testenv.RequireCommand(t, "fsck.erofs")
	x := filepath.Join(t.TempDir(), "x")
	if out, err := exec.Command(fsck, "--extract="+x, p.File).CombinedOutput(); err != nil {
		t.Fatalf("fsck.erofs --extract: %v: %s", err, out)
	}
	for rel, uid := range map[string]uint32{".": 0, "etc/os-release": 0, "home/agent": 123456} {
		fi, err := os.Lstat(filepath.Join(x, rel))
		if err != nil || fi.Sys().(*syscall.Stat_t).Uid != uid {
			t.Errorf("%s: %v; want uid %d in the image", rel, err, uid)
		}
	}
}

// TestImagePullPolicy: the [images] rules refuse before the unpacker starts (a tag under
// require_digests, another registry), and the unpacker refuses a tag whose resolved
// digest allowed_images does not list; each error wraps ociref.ErrPolicy and names the
// rule, and nothing is stored.
func TestImagePullPolicy(t *testing.T) {
	other := "sha256:" + strings.Repeat("0", 64)
	for _, c := range []struct{ policy, rule string }{
		{"[images]\nrequire_digests = true\n", "require_digests"},
		{"[images]\nallowed_images = [\"ghcr.io/corp\"]\n", "allowed_images"},
		{"[images]\nallowed_images = [\"" + other + "\"]\n", "allowed_images"},
	} {
		f := newPullFixture(t, c.policy)
		var logb bytes.Buffer
		_, err := pullImage(t.Context(), f.cfg, f.host+"/test:v1", &logb)
		if !errors.Is(err, ociref.ErrPolicy) || !strings.Contains(err.Error(), c.rule) {
			t.Errorf("policy %q: pull = %v; want ErrPolicy naming %s\n%s", c.policy, err, c.rule, logb.String())
		}
		if ents, _ := os.ReadDir(storeOf(f.cfg).Images()); len(ents) != 0 {
			t.Errorf("policy %q: refused pull left %v", c.policy, ents)
		}
	}
	for _, args := range [][]string{{"pull"}, {"pull", "a", "b"}, {"pull", "--bogus", "a"}} {
		if code := imageMain(args); code != 2 {
			t.Errorf("image %q: exit %d, want 2", args, code)
		}
	}
	// The digest itself, allowed by digest, is pulled.
	f := newPullFixture(t, "[images]\nrequire_digests = true\nallowed_images = [\"DIGEST\"]\n")
	if _, err := pullImage(t.Context(), f.cfg, f.host+"/test@"+f.digest, io.Discard); err != nil {
		t.Errorf("allowed digest: %v", err)
	}
}

// TestImagePolicyListed: list_images carries the [images] table as the helper reads it,
// with the defaults when the system policy has none or there is no file.
func TestImagePolicyListed(t *testing.T) {
	cfg := artifactCfg(t.TempDir())
	cfg.Egress.PolicyPath = filepath.Join(t.TempDir(), "policy.toml")
	if p, err := imagePolicy(cfg); err != nil || p.File != "" || !p.OnDemandBuilds || p.RequireDigests || len(p.AllowedImages) != 0 {
		t.Errorf("no file: %+v, %v", p, err)
	}
	os.WriteFile(cfg.Egress.PolicyPath, []byte("[images]\nrequire_digests = true\non_demand_builds = false\nallowed_images = [\"ghcr.io/corp\"]\n"), 0o644)
	p, err := imagePolicy(cfg)
	if err != nil || p.File != cfg.Egress.PolicyPath || p.OnDemandBuilds || !p.RequireDigests || len(p.AllowedImages) != 1 {
		t.Errorf("policy: %+v, %v", p, err)
	}
	l, err := imageList(cfg)
	if err != nil || l.Policy == nil || !l.Policy.RequireDigests {
		t.Errorf("imageList: %+v, %v", l, err)
	}
}
