package main

import (
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"brood.dev/brood/frontend/cli"
)

// generated are the paths of the files genDocs wrote.
type generated struct {
	Man       []string // man/<command>.1.gz, one per command
	Bash      string   // bash completion script
	Zsh       string   // zsh completion function (_brood)
	Fish      string   // fish completion script
	Changelog string   // Debian changelog.gz
	RPMLog    string   // the same entry as a chglog YAML file, for nfpm's rpm changelog
	HelperMan string   // broodd-helper.8.gz (from packaging/files)
	SELinux   string   // brood.pp (rpm only; buildSELinux)
}

// genDocs writes man pages (section 1, one per command, cobra/doc) and the bash, zsh and
// fish completions of brood's command tree into dir, plus the gzipped broodd-helper.8 and
// a one-entry Debian changelog for version dated at mtime.
func genDocs(root, dir, version string, mtime time.Time) (generated, error) {
	var g generated
	cmd := cli.NewRootCommand()
	cmd.DisableAutoGenTag = true // no generation date in the pages: reproducible packages
	manDir := filepath.Join(dir, "man")
	if err := os.MkdirAll(manDir, 0o755); err != nil {
		return g, err
	}
	hdr := &doc.GenManHeader{Title: "BROOD", Section: "1", Source: "brood " + version, Manual: "brood manual", Date: &mtime}
	if err := doc.GenManTree(cmd, hdr, manDir); err != nil {
		return g, fmt.Errorf("generate man pages: %w", err)
	}
	pages, err := filepath.Glob(filepath.Join(manDir, "*.1"))
	if err != nil {
		return g, err
	}
	for _, p := range pages {
		if err := gzipFile(p, p+".gz", mtime); err != nil {
			return g, err
		}
		g.Man = append(g.Man, p+".gz")
	}
	if g.Bash, g.Zsh, g.Fish, err = genCompletions(cmd, dir); err != nil {
		return g, err
	}
	g.HelperMan = filepath.Join(dir, "broodd-helper.8.gz")
	if err := gzipFile(filepath.Join(root, "packaging/files/broodd-helper.8"), g.HelperMan, mtime); err != nil {
		return g, err
	}
	g.Changelog = filepath.Join(dir, "changelog")
	entry := fmt.Sprintf("brood (%s) unstable; urgency=medium\n\n  * Package built from git (see the repository history).\n\n -- brood maintainers <brood@brood.dev>  %s\n",
		version, mtime.UTC().Format("Mon, 02 Jan 2006 15:04:05 -0700"))
	if err := os.WriteFile(g.Changelog, []byte(entry), 0o644); err != nil {
		return g, err
	}
	if err := gzipFile(g.Changelog, g.Changelog+".gz", mtime); err != nil {
		return g, err
	}
	g.Changelog += ".gz"
	g.RPMLog = filepath.Join(dir, "changelog.yaml")
	rpmLog := fmt.Sprintf("- semver: %q\n  date: %q\n  packager: \"brood maintainers <brood@brood.dev>\"\n  changes:\n    - note: \"Package built from git (see the repository history).\"\n",
		version+"-1", mtime.UTC().Format(time.RFC3339))
	return g, os.WriteFile(g.RPMLog, []byte(rpmLog), 0o644)
}

// genCompletions writes brood's bash (v2, with descriptions), zsh and fish completions
// into dir and returns their paths.
func genCompletions(cmd *cobra.Command, dir string) (bash, zsh, fish string, err error) {
	bash, zsh, fish = filepath.Join(dir, "brood.bash"), filepath.Join(dir, "_brood"), filepath.Join(dir, "brood.fish")
	if err = cmd.GenBashCompletionFileV2(bash, true); err != nil {
		return "", "", "", fmt.Errorf("generate bash completion: %w", err)
	}
	if err = cmd.GenZshCompletionFile(zsh); err != nil {
		return "", "", "", fmt.Errorf("generate zsh completion: %w", err)
	}
	if err = cmd.GenFishCompletionFile(fish, true); err != nil {
		return "", "", "", fmt.Errorf("generate fish completion: %w", err)
	}
	return bash, zsh, fish, nil
}

// gzipFile writes src gzipped at maximum compression to dst, with mtime in the gzip
// header and no file name (reproducible; lintian's gzip checks).
func gzipFile(src, dst string, mtime time.Time) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	zw, err := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err != nil {
		f.Close()
		return err
	}
	zw.ModTime = mtime
	if _, err := zw.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("gzip %q: %w", dst, err)
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return fmt.Errorf("gzip %q: %w", dst, err)
	}
	return f.Close()
}
