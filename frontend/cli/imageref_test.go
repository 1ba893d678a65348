package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/helper/api"
)

const testDigestHex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestStoreImage: names pass, digest references map offline to their pull's store name,
// tags and malformed strings are refused with what to do.
func TestStoreImage(t *testing.T) {
	for in, want := range map[string]string{
		"codex": "codex",
		"127.0.0.1:5000/test@sha256:" + testDigestHex: "oci-" + testDigestHex[:32],
		"ghcr.io/corp/tool@sha256:" + testDigestHex:   "oci-" + testDigestHex[:32],
	} {
		if got, err := storeImage("run", in); err != nil || got != want {
			t.Errorf("storeImage(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"127.0.0.1:5000/test:v1": "brood image pull 127.0.0.1:5000/test:v1",
		"debian:12":              "pull it first",
		"Bad_Name!":              "not an image name",
		"Upper/x@sha256:00":      "image reference",
	} {
		if _, err := storeImage("run", in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("storeImage(%q) = %v; want an error with %q", in, err, want)
		}
	}
}

// TestImagePullPrintsHelperCommand: brood pulls nothing itself: a tag gets the
// privileged command, a digest reference is pulled by the helper (build_image), a
// malformed reference is a usage error.
func TestImagePullPrintsHelperCommand(t *testing.T) {
	f := newFakeHelper(t)
	code, _, stderr := broodCode(t, "image", "pull", "127.0.0.1:5000/test:v1")
	if code != ExitUsage || !strings.Contains(stderr, "sudo broodd-helper image pull 127.0.0.1:5000/test:v1") || len(f.BuildArgs()) != 0 {
		t.Errorf("pull: exit %d %q", code, stderr)
	}
	ref := "127.0.0.1:5000/test@sha256:" + testDigestHex
	f.Builds = []api.BuildStatus{{State: api.BuildDone, File: "oci-x-y.erofs", Progress: []api.BuildProgress{{Seq: 1, Phase: "pull"}}, Next: 1}}
	code, out, _ := broodCode(t, "image", "pull", ref)
	if code != ExitOK || !strings.Contains(out, ": pull") || !strings.Contains(out, "oci-x-y.erofs") || len(f.BuildArgs()) != 1 || f.BuildArgs()[0].Ref != ref {
		t.Errorf("pull by digest: exit %d %q, requests %+v", code, out, f.BuildArgs())
	}
	if code, _, stderr := broodCode(t, "image", "pull", "UPPER/x"); code != ExitUsage || strings.Contains(stderr, "sudo") {
		t.Errorf("bad reference: exit %d %q", code, stderr)
	}
}

// TestRunImageReference: run-image, --image and an agent's config image accept a digest
// reference and boot its store name; a tag is refused before anything is snapshotted.
func TestRunImageReference(t *testing.T) {
	ref := "127.0.0.1:5000/test@sha256:" + testDigestHex
	pulled := "oci-" + testDigestHex[:32]
	f := newFakeHelper(t)
	f.Caps.Images, f.Caps.HostCPUs, f.Caps.HostMemoryMiB = []string{pulled}, 2, 4096
	if code, _, stderr, _ := fakeRun(t, "run-image", ref, "--", "true"); code != 0 {
		t.Errorf("run-image %s: exit %d\n%s", ref, code, stderr)
	}
	f.Caps.Images = []string{"test"}
	code, _, stderr, _ := fakeRun(t, "run", "--image", ref, "shell")
	if code != ExitError || !strings.Contains(stderr, `image not built: "`+pulled+`"`) || !strings.Contains(stderr, "broodd-helper image pull") {
		t.Errorf("run --image %s, not pulled: exit %d\n%s", ref, code, stderr)
	}
	code, _, stderr, ss := fakeRun(t, "run-image", "127.0.0.1:5000/test:v1", "--", "true")
	if code != ExitUsage || !strings.Contains(stderr, "pull it first") || len(ss) != 0 {
		t.Errorf("run-image by tag: exit %d, sessions %d\n%s", code, len(ss), stderr)
	}
	// The user config: a digest reference is an agent's image, a tag is a config error.
	dir := t.TempDir()
	p := filepath.Join(dir, "config.toml")
	os.WriteFile(p, []byte("[agents.tool]\nimage = \""+ref+"\"\ncommand = [\"tool\"]\n"), 0o644)
	if cfg, err := loadUserConfig(p); err != nil || cfg.Agents["tool"].Image != ref {
		t.Errorf("config with a digest reference: %v", err)
	}
	os.WriteFile(p, []byte("[agents.tool]\nimage = \"127.0.0.1:5000/test:v1\"\ncommand = [\"tool\"]\n"), 0o644)
	if _, err := loadUserConfig(p); err == nil || !strings.Contains(err.Error(), "pull it first") {
		t.Errorf("config with a tag: %v", err)
	}
}

// TestImageListShowsPolicy: brood image list prints the helper's [images] rules.
func TestImageListShowsPolicy(t *testing.T) {
	f := newFakeHelper(t)
	f.Images = api.ImageList{Store: "/s", Recipes: []string{"test"}, Policy: &api.ImagePolicy{
		File: "/etc/brood/policy.toml", RequireDigests: true, AllowedImages: []string{"ghcr.io/corp", "127.0.0.1:5000"}}}
	var out, errw bytes.Buffer
	if err := runImageList(context.Background(), &out, &errw, api.SocketPath()); err != nil {
		t.Fatal(err)
	}
	want := "brood: image policy (/etc/brood/policy.toml): require_digests true, on_demand_builds false, allowed_images: ghcr.io/corp, 127.0.0.1:5000"
	if !strings.Contains(errw.String(), want) {
		t.Errorf("stderr %q; want %q", errw.String(), want)
	}
	f.Images.Policy = &api.ImagePolicy{OnDemandBuilds: true}
	errw.Reset()
	if err := runImageList(context.Background(), &out, &errw, api.SocketPath()); err != nil || !strings.Contains(errw.String(), "(no system policy file): require_digests false, on_demand_builds true, allowed_images: any image") {
		t.Errorf("no policy: %v %q", err, errw.String())
	}
}
