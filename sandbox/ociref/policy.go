package ociref

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Policy is the system policy's part about images, the `[images]` table of the policy
// file (/etc/brood/policy.toml, decoded strictly with the rest of it by package
// netpolicy):
//
//	[images]
//	require_digests  = true                 # refuse tags: REG/REPO@sha256:<hex> only
//	on_demand_builds = false                # brood run never asks the helper to build
//	allowed_images   = [
//	  "ghcr.io/corp",                       # a registry/repository prefix (whole components)
//	  "127.0.0.1:5000",                     # a whole registry
//	  "docker.io/library/debian@sha256:…",  # one image of one repository
//	  "sha256:…",                           # one image, from any allowed-or-not repository
//	]
//
// The zero value restricts nothing, like the rest of the system policy: an empty
// allowed_images allows every image, tags are accepted (and resolved to a digest the
// caller records), and on-demand builds are on.
type Policy struct {
	RequireDigests bool     `toml:"require_digests"`
	AllowedImages  []string `toml:"allowed_images"`
	// OnDemandBuilds (nil: true) lets the helper build a recipe's missing image when a
	// session asks for it; false leaves building to `broodd-helper image build`.
	OnDemandBuilds *bool `toml:"on_demand_builds"`
}

// OnDemand reports whether on-demand builds are allowed (on_demand_builds, default true).
func (p Policy) OnDemand() bool { return p.OnDemandBuilds == nil || *p.OnDemandBuilds }

var digestRe = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// allowEntry is one parsed allowed_images entry: a registry, a repository prefix, a
// repository with a digest, or a bare digest.
type allowEntry struct {
	registry string // whole registry ("127.0.0.1:5000"); nothing else set
	prefix   string // "REGISTRY/REPO" prefix, matched on whole path components
	digest   string // "sha256:<hex>"; with prefix set, that exact repository only
}

// Validate reports the first allowed_images entry that is not one of the four forms.
func (p Policy) Validate() error {
	for _, s := range p.AllowedImages {
		if _, err := parseAllow(s); err != nil {
			return err
		}
	}
	return nil
}

func parseAllow(s string) (allowEntry, error) {
	bad := func(why string) (allowEntry, error) {
		return allowEntry{}, fmt.Errorf("allowed_images entry %q: %s", s, why)
	}
	switch {
	case strings.HasPrefix(s, "sha256:"):
		if !digestRe.MatchString(s) {
			return bad("not sha256: and 64 lower-case hex digits")
		}
		return allowEntry{digest: s}, nil
	case strings.Contains(s, "@"):
		d, err := name.NewDigest(s)
		if err != nil || !digestRe.MatchString(d.DigestStr()) {
			return bad("not REGISTRY/REPO@sha256:<hex>")
		}
		return allowEntry{prefix: d.Context().Name(), digest: d.DigestStr()}, nil
	case !strings.Contains(s, "/"):
		r, err := name.NewRegistry(s)
		if err != nil {
			return bad("not a registry name")
		}
		return allowEntry{registry: r.Name()}, nil
	}
	r, err := name.NewRepository(strings.TrimSuffix(s, "/"))
	if err != nil {
		return bad("not REGISTRY/REPO")
	}
	return allowEntry{prefix: r.Name()}, nil
}

// matches reports whether e allows repo (normalised "REGISTRY/REPO") at digest; an
// empty digest (a tag not yet resolved) matches digest entries as "maybe" (true).
func (e allowEntry) matches(repo name.Repository, digest string) bool {
	n := repo.Name()
	switch {
	case e.registry != "":
		return repo.RegistryStr() == e.registry
	case e.digest == "": // a repository prefix
		return n == e.prefix || strings.HasPrefix(n, e.prefix+"/")
	case e.prefix != "" && n != e.prefix: // REPO@digest names one repository exactly
		return false
	}
	return digest == "" || digest == e.digest
}

// Check applies the policy to ref, whose content digest ("sha256:<hex>") is digest, or
// empty before a tag is resolved (Check is then called again with the resolved digest).
// It returns nil or an error wrapping ErrPolicy naming the reference and the rule.
func (p Policy) Check(ref name.Reference, digest string) error {
	if _, isTag := ref.(name.Tag); isTag && p.RequireDigests {
		return fmt.Errorf("image %s: policy require_digests: a tag is not a digest (use %s@sha256:<hex>): %w",
			ref, ref.Context(), ErrPolicy)
	}
	if len(p.AllowedImages) == 0 {
		return nil
	}
	for _, s := range p.AllowedImages {
		e, err := parseAllow(s)
		if err != nil {
			return fmt.Errorf("image %s: policy: %v: %w", ref, err, ErrPolicy)
		}
		if e.matches(ref.Context(), digest) {
			return nil
		}
	}
	what := ref.String()
	if digest != "" && !strings.Contains(what, "@") {
		what += " (" + digest + ")"
	}
	return fmt.Errorf("image %s: policy allowed_images: no entry allows it (%d entries): %w",
		what, len(p.AllowedImages), ErrPolicy)
}

// CheckRef parses ref and applies the policy before anything is fetched: a tag is
// checked without a digest (Check must run again once it is resolved). Errors wrap
// ErrPolicy, or name the unparsable reference.
func (p Policy) CheckRef(ref string) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	digest := ""
	if d, ok := r.(name.Digest); ok {
		digest = d.DigestStr()
	}
	return p.Check(r, digest)
}
