package main

import (
	"path/filepath"

	"github.com/goreleaser/nfpm/v2/files"
)

// docFile is a documentation file: in the rpm marked with rpmType (%doc, %license, %readme:
// rpm -qd lists it, --excludedocs skips it), in the .deb a plain file (dpkg has no such
// mark).
func docFile(src, dst, rpmType string) files.Contents {
	r := file(src, dst, 0o644)
	r.Type, r.Packager = rpmType, "rpm"
	d := file(src, dst, 0o644)
	d.Packager = "deb"
	return files.Contents{r, d}
}

// Paths in the package that tests and docs/packaging.md name.
const (
	unitDir     = "/usr/lib/systemd/system"
	configDir   = "/etc/brood"
	docDir      = "/usr/share/doc/brood"
	lintianFile = "/usr/share/lintian/overrides/brood"
	// selinuxModule is where the rpm puts brood.pp (Fedora's layout for policy modules).
	selinuxModule = "/usr/share/selinux/packages/brood/brood.pp"
)

// contents lists every file of the package (both formats unless Packager is set): the
// binaries built into bin, the units, the config files (noreplace: an upgrade never
// overwrites an edited file; dpkg conffiles, rpm %config(noreplace)), the generated man
// pages and completions, and the documentation.
func contents(root, bin string, docs generated) files.Contents {
	src := func(rel string) string { return filepath.Join(root, rel) }
	var c files.Contents
	for _, b := range binaries {
		c = append(c, file(filepath.Join(bin, b.Name), b.Dest, 0o755))
	}
	for _, u := range []string{"broodd-helper.socket", "broodd-helper.service"} {
		c = append(c, file(src("systemd/"+u), unitDir+"/"+u, 0o644))
	}
	c = append(c, &files.Content{Destination: configDir, Type: files.TypeDir,
		FileInfo: &files.ContentFileInfo{Mode: 0o755, Owner: "root", Group: "root"}})
	for _, f := range []string{"helper.toml", "policy.toml"} {
		conf := file(src("packaging/files/"+f), configDir+"/"+f, 0o644)
		conf.Type = files.TypeConfigNoReplace
		c = append(c, conf)
	}
	for _, m := range docs.Man {
		c = append(c, docFile(m, "/usr/share/man/man1/"+filepath.Base(m), files.TypeRPMDoc)...)
	}
	c = append(c, docFile(docs.HelperMan, "/usr/share/man/man8/broodd-helper.8.gz", files.TypeRPMDoc)...)
	c = append(c, docFile(src("README.md"), docDir+"/README.md", files.TypeRPMDoc)...)
	c = append(c, docFile(src("docs/packaging.md"), docDir+"/packaging.md", files.TypeRPMDoc)...)
	c = append(c, docFile(src("docs/egress-policy.md"), docDir+"/egress-policy.md", files.TypeRPMDoc)...)
	c = append(c, docFile(src("packaging/files/copyright"), docDir+"/copyright", files.TypeRPMDoc)...)
	c = append(c,
		file(docs.Bash, "/usr/share/bash-completion/completions/brood", 0o644),
		file(docs.Fish, "/usr/share/fish/vendor_completions.d/brood.fish", 0o644),
	)
	// zsh: Debian's vendor directory and Fedora's site-functions; Debian's changelog and
	// lintian overrides.
	zshDeb := file(docs.Zsh, "/usr/share/zsh/vendor-completions/_brood", 0o644)
	zshDeb.Packager = "deb"
	zshRPM := file(docs.Zsh, "/usr/share/zsh/site-functions/_brood", 0o644)
	zshRPM.Packager = "rpm"
	changelog := file(docs.Changelog, docDir+"/changelog.gz", 0o644)
	changelog.Packager = "deb"
	lintian := file(src("packaging/files/lintian-overrides"), lintianFile, 0o644)
	lintian.Packager = "deb"
	c = append(c, zshDeb, zshRPM, changelog, lintian)
	// The SELinux module: the rpm's postinstall loads it where SELinux is enabled.
	if docs.SELinux != "" {
		pp := file(docs.SELinux, selinuxModule, 0o644)
		pp.Packager = "rpm"
		iface := file(src("selinux/brood.if"), "/usr/share/selinux/devel/include/contrib/brood.if", 0o644)
		iface.Packager = "rpm"
		c = append(c, pp, iface)
	}
	return c
}
