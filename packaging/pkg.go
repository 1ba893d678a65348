package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the "deb" packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the "rpm" packager
)

// options are the command's flags.
type options struct {
	Root     string   // repository root
	Out      string   // output directory
	Describe string   // git describe output; empty: run git
	Arches   []string // GOARCH values
	Formats  []string // nfpm packager names
}

// qemuPackage is the Debian and Fedora package of the QEMU system emulator for a GOARCH
// (the helper runs qemu-system-<arch>, sandbox/qemu).
var qemuPackage = map[string]struct{ Deb, RPM string }{
	"amd64": {"qemu-system-x86", "qemu-system-x86-core"},
	"arm64": {"qemu-system-arm", "qemu-system-aarch64-core"},
}

// run builds every requested package into o.Out and returns their paths.
func run(o options) ([]string, error) {
	describe, date := o.Describe, time.Now().UTC().Format("20060102")
	if describe == "" {
		var err error
		if describe, date, err = describeVersion(o.Root); err != nil {
			return nil, err
		}
	}
	version, err := packageVersion(describe, date)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "brood-packaging-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	mtime := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	docs, err := genDocs(o.Root, work, version, mtime)
	if err != nil {
		return nil, err
	}
	if slices.Contains(o.Formats, "rpm") {
		if docs.SELinux, err = buildSELinux(o.Root, filepath.Join(work, "selinux")); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, arch := range o.Arches {
		if _, ok := qemuPackage[arch]; !ok {
			return nil, fmt.Errorf("architecture %q: not amd64 or arm64", arch)
		}
		bin := filepath.Join(work, arch)
		if err := os.Mkdir(bin, 0o755); err != nil {
			return nil, err
		}
		if err := buildBinaries(o.Root, bin, arch, describe); err != nil {
			return nil, err
		}
		for _, format := range o.Formats {
			info := packageInfo(o.Root, bin, arch, format, version, docs, mtime)
			p, err := writePackage(info, format, o.Out)
			if err != nil {
				return nil, err
			}
			paths = append(paths, p)
		}
	}
	return paths, nil
}

// writePackage writes info as a package of format into dir under the packager's
// conventional file name and returns its path.
func writePackage(info *nfpm.Info, format, dir string) (string, error) {
	pkgr, err := nfpm.Get(format)
	if err != nil {
		return "", fmt.Errorf("package format %q: %w", format, err)
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, format); err != nil {
		return "", fmt.Errorf("prepare %s package: %w", format, err)
	}
	path := filepath.Join(dir, pkgr.ConventionalFileName(info))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := pkgr.Package(info, f); err != nil {
		f.Close()
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, f.Close()
}

// packageInfo describes the brood package for arch in format ("deb" or "rpm"): metadata,
// dependencies by the distribution's package names, maintainer scripts and contents.
func packageInfo(root, bin, arch, format, version string, docs generated, mtime time.Time) *nfpm.Info {
	q := qemuPackage[arch]
	depends := []string{q.Deb, "nftables", "erofs-utils", "kmod", "xz-utils"}
	if format == "rpm" {
		// Fedora's names (kmod, nftables, erofs-utils and mmdebstrap are spelled alike).
		depends = []string{q.RPM, "nftables", "erofs-utils", "kmod", "xz"}
	}
	scripts := filepath.Join(root, "packaging/scripts")
	info := &nfpm.Info{
		Name:          "brood",
		Arch:          arch,
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none",
		Section:       "devel",
		Priority:      "optional",
		Maintainer:    "brood maintainers <brood@brood.dev>",
		Vendor:        "brood",
		Homepage:      "https://brood.dev",
		License:       "LicenseRef-brood-unlicensed",
		Description: "Run AI coding agents in microVMs and review their changes\n" +
			"brood runs an agent in a disposable QEMU microVM against a copy-on-write\n" +
			"snapshot of a workspace and shows a per-file review before anything is\n" +
			"written back. The privileged broodd-helper (socket activated) runs the VMs,\n" +
			"their taps and the egress firewall; users in group brood may use it.",
		MTime: mtime,
		Overridables: nfpm.Overridables{
			Depends:    depends,
			Recommends: []string{"mmdebstrap"},
			Contents:   contents(root, bin, docs),
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(scripts, "postinstall.sh"),
				PreRemove:   filepath.Join(scripts, "preremove.sh"),
				PostRemove:  filepath.Join(scripts, "postremove.sh"),
			},
			RPM: nfpm.RPM{
				Group:   "Development/Tools",
				Summary: "Run AI coding agents in microVMs and review their changes",
			},
		},
	}
	info.Overridables.RPM.Packager = info.Maintainer
	if format == "rpm" {
		// rpm needs a release; a .deb without a Debian revision is a native package
		// (deb-version(7)), matching its changelog.gz.
		info.Release = "1"
		info.Changelog = docs.RPMLog
	}
	return info
}

// file is a shorthand for one regular file in the package.
func file(src, dst string, mode os.FileMode) *files.Content {
	return &files.Content{Source: src, Destination: dst, FileInfo: &files.ContentFileInfo{Mode: mode, Owner: "root", Group: "root"}}
}
