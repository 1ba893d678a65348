// Package oci pulls OCI (and Docker) images from a registry with go-containerregistry
// and unpacks their layers into a directory tree, which package image then turns into
// the same read-only EROFS image the recipes build, named by the pulled digest
// (ociref.ImageName).
//
// A reference is parsed with go-containerregistry's name package ("alpine" is
// index.docker.io/library/alpine:latest). A tag is resolved to the digest the registry
// serves, which Pulled records so the caller can pin it; ociref.Policy (require_digests,
// allowed_images) is checked before any network access and again with the resolved
// digest. From an index the linux/GOARCH manifest is taken. go-containerregistry
// verifies the manifest against a reference's digest and each blob against the
// manifest; each layer is downloaded and verified in full before a byte of it is
// unpacked, and its uncompressed stream is checked against the configuration's diff ID.
//
// Layers are hostile input. Tree applies them in order relative to the tree's
// descriptor (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, O_NOFOLLOW, O_EXCL), never
// following a symlink a layer made, refusing with an *EntryError naming the layer digest
// and the entry: absolute names and ".." components, names over PATH_MAX or components
// over NAME_MAX, writes through a symlinked directory, whiteouts of "." or "..",
// hardlinks to anything but an existing file of the tree, duplicate entries in one
// layer, and entries or sizes over Limits (decided from the tar header, before writing).
// Setuid and setgid bits are cleared, device nodes and FIFOs skipped (both noted in the
// Report), xattrs (and so file capabilities) dropped. docs/oci-images.md lists the rules.
//
// Owners are kept either as the tree is written (TreeOptions.KeepOwners, Pull's default
// as root) or recorded by an unprivileged unpack (RecordOwners) and applied afterwards
// by root with ApplyOwners, which parses no tar.
//
// Privilege: pulling and unpacking need none; KeepOwners and ApplyOwners need
// CAP_CHOWN, and storing the image needs root (the root-owned store). Every write is
// confined to the tree by descriptor, not by privilege, so the tar parser can run
// unprivileged (RecordOwners). For broodd-helper and tests; never linked into brood.
package oci

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/klauspost/compress/zstd"

	"brood.dev/brood/sandbox/ociref"
)

// MaxLayers caps an image's layers: 127, Docker's limit (from overlayfs's lower-dir
// limit in older kernels); deeper images are not built by real tools.
const MaxLayers = 127

// Options configure Pull. The zero value pulls anonymously for linux/GOARCH with the
// default Limits and no policy restriction.
type Options struct {
	Policy   ociref.Policy
	Limits   Limits
	Platform *v1.Platform        // nil: linux/runtime.GOARCH
	Auth     authn.Authenticator // nil: anonymous
	// Transport is the HTTP transport (nil: http.DefaultTransport). Registries on
	// loopback, RFC 1918 addresses and "localhost:" are spoken to over plain HTTP, as
	// go-containerregistry does; digests still verify what they serve.
	Transport http.RoundTripper
	// KeepOwners: see TreeOptions (nil: keep them when running as root).
	KeepOwners *bool
	// RecordOwners (without KeepOwners) fills Pulled.Owners for ApplyOwners.
	RecordOwners bool
	// Log receives one progress line per step (resolved digest, each layer); nil: none.
	Log io.Writer
}

// Pulled is what Pull fetched.
type Pulled struct {
	Ref      string   // the reference as parsed ("index.docker.io/library/alpine:3")
	Repo     string   // "REGISTRY/REPO"
	Digest   string   // "sha256:<hex>" the reference names (index or manifest): pin this
	Manifest string   // "sha256:<hex>" of the linux/GOARCH image manifest
	Layers   []string // layer blob digests, in order
	Report   Report
	Owners   map[string]Owner // with Options.RecordOwners: see Tree.Owners
}

// Pinned is the digest reference of what was pulled: "REGISTRY/REPO@sha256:<hex>".
func (p *Pulled) Pinned() string { return p.Repo + "@" + p.Digest }

// Pull fetches ref and unpacks its linux/GOARCH image into tree, a directory Pull
// creates (it must not exist; its parent holds the downloaded layers while they are
// unpacked). On error the tree is removed. Errors wrap ErrPolicy, ErrPlatform, ErrDigest,
// an *EntryError, or go-containerregistry's (transport, digest verification).
func Pull(ctx context.Context, ref, tree string, o Options) (*Pulled, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := o.Policy.Check(r, digestOf(r)); err != nil {
		return nil, err
	}
	img, p, err := fetch(ctx, r, o)
	if err != nil {
		return nil, err
	}
	if err := o.Policy.Check(r, p.Digest); err != nil {
		return nil, err
	}
	logf(o.Log, "pull %s: %s, %d layers\n", r, p.Digest, len(p.Layers))
	keep := os.Geteuid() == 0
	if o.KeepOwners != nil {
		keep = *o.KeepOwners
	}
	t, err := NewTree(tree, TreeOptions{Limits: o.Limits, KeepOwners: keep, RecordOwners: o.RecordOwners})
	if err != nil {
		return nil, err
	}
	err = unpackAll(img, t, p, filepath.Dir(tree), o.Log)
	if err == nil {
		p.Report, err = t.Finish()
		p.Owners = t.Owners()
	}
	t.Close()
	if err != nil {
		os.RemoveAll(tree)
		return nil, fmt.Errorf("unpack image %s: %w", p.Pinned(), err)
	}
	return p, nil
}

// digestOf is ref's digest, or "" for a tag.
func digestOf(r name.Reference) string {
	if d, ok := r.(name.Digest); ok {
		return d.DigestStr()
	}
	return ""
}

// fetch resolves r and returns the image for o's platform with the Pulled record
// (without Report).
func fetch(ctx context.Context, r name.Reference, o Options) (v1.Image, *Pulled, error) {
	plat := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	if o.Platform != nil {
		plat = *o.Platform
	}
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithPlatform(plat)}
	if o.Auth != nil {
		ropts = append(ropts, remote.WithAuth(o.Auth))
	}
	if o.Transport != nil {
		ropts = append(ropts, remote.WithTransport(o.Transport))
	}
	desc, err := remote.Get(r, ropts...)
	if err != nil {
		return nil, nil, fmt.Errorf("fetch image %s: %w", r, err)
	}
	p := &Pulled{Ref: r.Name(), Repo: r.Context().Name(), Digest: desc.Digest.String()}
	img, err := platformImage(desc, plat)
	if err != nil {
		return nil, nil, fmt.Errorf("image %s (%s): %w", r, p.Digest, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, nil, fmt.Errorf("image %s manifest: %w", r, err)
	}
	d, err := img.Digest()
	if err != nil {
		return nil, nil, fmt.Errorf("image %s manifest: %w", r, err)
	}
	p.Manifest = d.String()
	if len(m.Layers) > MaxLayers {
		return nil, nil, fmt.Errorf("image %s: %d layers, more than %d: %w", r, len(m.Layers), MaxLayers, ErrLimit)
	}
	for _, l := range m.Layers {
		p.Layers = append(p.Layers, l.Digest.String())
	}
	return img, p, nil
}

// platformImage picks plat's image from an index (the first manifest whose platform
// satisfies it), or checks a single image's configuration against plat.
func platformImage(desc *remote.Descriptor, plat v1.Platform) (v1.Image, error) {
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, err
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		var have []string
		for _, m := range im.Manifests {
			if m.Platform != nil && m.Platform.Satisfies(plat) && m.MediaType.IsImage() {
				return idx.Image(m.Digest)
			}
			if m.Platform != nil {
				have = append(have, m.Platform.String())
			}
		}
		return nil, fmt.Errorf("want %s, index has [%s]: %w", plat, strings.Join(have, " "), ErrPlatform)
	}
	img, err := desc.Image()
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	if got := cf.Platform(); got == nil || !got.Satisfies(plat) {
		return nil, fmt.Errorf("want %s, image is %s/%s: %w", plat, cf.OS, cf.Architecture, ErrPlatform)
	}
	return img, nil
}

// unpackAll applies img's layers onto t in order, each downloaded and verified into a
// temporary file under work first.
func unpackAll(img v1.Image, t *Tree, p *Pulled, work string, log io.Writer) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for i, l := range layers {
		size, _ := l.Size()
		logf(log, "layer %d/%d %s: %d bytes\n", i+1, len(layers), p.Layers[i], size)
		if err := unpackLayer(l, t, p.Layers[i], work); err != nil {
			return err
		}
	}
	return nil
}

// unpackLayer downloads layer l (digest dg) in full, which verifies its blob digest,
// then applies its uncompressed tar stream to t and compares that stream with the
// layer's diff ID.
func unpackLayer(l v1.Layer, t *Tree, dg string, work string) error {
	size, err := l.Size()
	if err != nil {
		return fmt.Errorf("layer %s: %w", dg, err)
	}
	if size > t.lim.MaxTotalSize {
		return fmt.Errorf("layer %s: blob of %d bytes, more than %d: %w", dg, size, t.lim.MaxTotalSize, ErrLimit)
	}
	f, err := os.CreateTemp(work, ".layer-")
	if err != nil {
		return fmt.Errorf("layer %s: %w", dg, err)
	}
	defer f.Close()
	os.Remove(f.Name()) // only the descriptor is needed
	rc, err := l.Compressed()
	if err != nil {
		return fmt.Errorf("layer %s: %w", dg, err)
	}
	_, err = io.Copy(f, rc) // go-containerregistry fails the read on a digest or size mismatch
	rc.Close()
	if err != nil {
		return fmt.Errorf("download layer %s: %w", dg, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	diffID, err := l.DiffID()
	if err != nil {
		return fmt.Errorf("layer %s: %w", dg, err)
	}
	return applyVerified(t, dg, f, diffID, t.lim.MaxTotalSize+int64(t.lim.MaxEntries)*4096)
}

// applyVerified decompresses blob (gzip, zstd or plain tar, by its magic bytes), applies
// it to t as layer dg and checks the whole uncompressed stream (at most maxStream bytes)
// against diffID.
func applyVerified(t *Tree, dg string, blob io.Reader, diffID v1.Hash, maxStream int64) error {
	br := bufio.NewReaderSize(blob, 1<<20)
	magic, _ := br.Peek(4)
	var r io.Reader = br
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		z, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("layer %s: gzip: %w", dg, err)
		}
		r = z
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		z, err := zstd.NewReader(br)
		if err != nil {
			return fmt.Errorf("layer %s: zstd: %w", dg, err)
		}
		defer z.Close()
		r = z
	}
	h := sha256.New()
	lr := &io.LimitedReader{R: r, N: maxStream + 1}
	tee := io.TeeReader(lr, h)
	if err := t.Apply(dg, tee); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, tee); err != nil { // the padding after the trailer counts
		return fmt.Errorf("layer %s: read: %w", dg, err)
	}
	if lr.N <= 0 {
		return fmt.Errorf("layer %s: uncompressed stream over %d bytes: %w", dg, maxStream, ErrLimit)
	}
	return checkDiffID(dg, h, diffID)
}

func checkDiffID(dg string, h hash.Hash, want v1.Hash) error {
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if got != want.String() {
		return fmt.Errorf("layer %s: uncompressed %s, configuration says %s: %w", dg, got, want, ErrDigest)
	}
	return nil
}

// logf writes one progress line to w, when there is one.
func logf(w io.Writer, format string, a ...any) {
	if w != nil {
		fmt.Fprintf(w, format, a...)
	}
}
