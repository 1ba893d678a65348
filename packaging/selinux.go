package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// selinuxMakefile is the policy module build of the reference policy's development files
// (Debian and Fedora: selinux-policy-dev / selinux-policy-devel).
const selinuxMakefile = "/usr/share/selinux/devel/Makefile"

// buildSELinux compiles selinux/brood.{te,fc,if} into dir/brood.pp with selinuxMakefile
// and returns its path; the sources are copied to dir first (the Makefile writes next to
// them).
func buildSELinux(root, dir string) (string, error) {
	if _, err := os.Stat(selinuxMakefile); err != nil {
		return "", fmt.Errorf("build the SELinux module: %w (install selinux-policy-dev)", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for _, ext := range []string{"te", "fc", "if"} {
		data, err := os.ReadFile(filepath.Join(root, "selinux/brood."+ext))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, "brood."+ext), data, 0o644); err != nil {
			return "", err
		}
	}
	cmd := exec.Command("make", "-f", selinuxMakefile, "brood.pp")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("make brood.pp: %w\n%s", err, strings.TrimSpace(string(out)))
	}
	return filepath.Join(dir, "brood.pp"), nil
}
