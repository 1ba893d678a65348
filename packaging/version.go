package main

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
)

// describeVersion runs `git describe --tags --always --dirty --match v[0-9]*` in root and
// returns its output (e.g. "v0.3.0-12-gabc1234", or "72a5af7-dirty" without a tag) and
// the commit date of HEAD as YYYYMMDD (UTC, committer date).
func describeVersion(root string) (describe, date string, err error) {
	out, err := exec.Command("git", "-C", root, "describe", "--tags", "--always", "--dirty", "--match", "v[0-9]*").Output()
	if err != nil {
		return "", "", fmt.Errorf("git describe in %q: %w", root, err)
	}
	d, err := exec.Command("git", "-C", root, "show", "-s", "--format=%cd", "--date=format-local:%Y%m%d", "HEAD").Output()
	if err != nil {
		return "", "", fmt.Errorf("git show HEAD date in %q: %w", root, err)
	}
	return strings.TrimSpace(string(out)), strings.TrimSpace(string(d)), nil
}

// tagged matches `git describe` output from a release tag: vMAJOR.MINOR.PATCH, then
// optionally -COMMITS-gHASH and -dirty.
var tagged = regexp.MustCompile(`^v(\d+\.\d+\.\d+)(?:-(\d+)-g([0-9a-f]+))?(-dirty)?$`)

// untagged matches `git describe --always` output without a tag: HASH and -dirty.
var untagged = regexp.MustCompile(`^([0-9a-f]{4,40})(-dirty)?$`)

// packageVersion turns `git describe` output into a version valid for both dpkg
// (deb-version(7)) and rpm (no '-'), ordered by release and then by commit:
//
//	v1.2.3                 -> 1.2.3
//	v1.2.3-4-gabc1234      -> 1.2.3+4.gabc1234
//	abc1234 (no tag)       -> 0.0.0+git<date>.abc1234   (date YYYYMMDD of HEAD)
//	any of them, -dirty    -> ... with ".dirty" appended
func packageVersion(describe, date string) (string, error) {
	if m := tagged.FindStringSubmatch(describe); m != nil {
		v := m[1]
		if m[2] != "" {
			v += "+" + m[2] + ".g" + m[3]
		}
		if m[4] != "" {
			if m[2] == "" {
				v += "+0"
			}
			v += ".dirty"
		}
		return v, nil
	}
	if m := untagged.FindStringSubmatch(describe); m != nil && len(date) == 8 {
		v := "0.0.0+git" + date + "." + m[1]
		if m[2] != "" {
			v += ".dirty"
		}
		return v, nil
	}
	return "", fmt.Errorf("package version from git describe %q (date %q): not vX.Y.Z[-N-gHASH][-dirty] or HASH[-dirty]", describe, date)
}
