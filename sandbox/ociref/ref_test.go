package ociref

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
)

func TestPolicyValidate(t *testing.T) {
	good := Policy{AllowedImages: []string{"ghcr.io", "ghcr.io/corp/", "docker.io/library/debian@sha256:" + strings.Repeat("a", 64), "sha256:" + strings.Repeat("b", 64)}}
	if err := good.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	for _, bad := range []string{"sha256:abc", "x@sha256:zz", "UPPER/Case", "ghcr.io/a@sha512:" + strings.Repeat("a", 128)} {
		if err := (Policy{AllowedImages: []string{bad}}).Validate(); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("Validate(%q) = %v; want an error naming it", bad, err)
		}
	}
	r := name.MustParseReference("debian:12")
	if err := (Policy{AllowedImages: []string{"docker.io/library/debian"}}).Check(r, ""); err != nil {
		t.Errorf("docker.io normalisation: %v", err)
	}
}

func TestImageName(t *testing.T) {
	n, err := ImageName("sha256:" + strings.Repeat("ab", 32))
	if err != nil || n != "oci-"+strings.Repeat("ab", 16) {
		t.Errorf("ImageName = %q, %v", n, err)
	}
	for _, bad := range []string{"", "sha256:12", "sha512:" + strings.Repeat("a", 64)} {
		if _, err := ImageName(bad); err == nil {
			t.Errorf("ImageName(%q) accepted", bad)
		}
	}
	if !IsReference("127.0.0.1:5000/test@sha256:00") || !IsReference("debian:12") || IsReference("codex") {
		t.Errorf("IsReference wrong")
	}
}

func TestRefImageName(t *testing.T) {
	d := "sha256:" + strings.Repeat("cd", 32)
	n, err := RefImageName("127.0.0.1:5000/test@" + d)
	if err != nil || n != "oci-"+strings.Repeat("cd", 16) {
		t.Errorf("RefImageName(digest) = %q, %v", n, err)
	}
	_, err = RefImageName("127.0.0.1:5000/test:v1")
	if !errors.Is(err, ErrTag) || !strings.Contains(err.Error(), "brood image pull 127.0.0.1:5000/test:v1") {
		t.Errorf("RefImageName(tag) = %v; want ErrTag telling to pull", err)
	}
	if _, err := RefImageName("UPPER/x@" + d); err == nil {
		t.Errorf("RefImageName accepted an invalid reference")
	}
}

func TestOnDemand(t *testing.T) {
	off := false
	if !(Policy{}).OnDemand() || (Policy{OnDemandBuilds: &off}).OnDemand() {
		t.Errorf("OnDemand: default must be true, false must be false")
	}
}
