//go:build linux

// Command mkbench prepares the fixture of scripts/bench-diff.sh: a workspace of N files,
// a brood session snapshotting it (made with difftest.Snapshot and manifest.Write, state
// stopped) and C agent changes in the snapshot. It prints "ID W S" on stdout.
//
//	BROOD_STATE_DIR=DIR/state go run ./frontend/diff/difftest/mkbench -dir DIR -files 50000 -changed 10
//
// Privilege: none; a benchmark tool run by scripts/bench-diff.sh, never shipped.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"brood.dev/brood/frontend/diff/difftest"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/session"
)

func main() {
	dir := flag.String("dir", "", "directory to create the workspace in (DIR/w)")
	files := flag.Int("files", 50000, "number of files in the workspace")
	changed := flag.Int("changed", 10, "number of changes the fake agent makes in the snapshot")
	flag.Parse()
	if err := run(*dir, *files, *changed); err != nil {
		fmt.Fprintln(os.Stderr, "mkbench:", err)
		os.Exit(1)
	}
}

func run(dir string, files, changed int) error {
	if dir == "" {
		return fmt.Errorf("-dir is required")
	}
	w := filepath.Join(dir, "w")
	if err := os.MkdirAll(w, 0o755); err != nil {
		return err
	}
	paths, err := difftest.Tree(w, files)
	if err != nil {
		return err
	}
	sess, err := session.Create(w)
	if err != nil {
		return err
	}
	if err := os.Mkdir(sess.SnapshotDir(), 0o700); err != nil {
		return err
	}
	m, err := difftest.Snapshot(w, sess.SnapshotDir(), true)
	if err != nil {
		return err
	}
	if err := manifest.Write(sess.ManifestPath(), m); err != nil {
		return err
	}
	if err := sess.SetState(session.StateStopped); err != nil {
		return err
	}
	if err := difftest.Mutate(sess.SnapshotDir(), paths, changed); err != nil {
		return err
	}
	fmt.Println(sess.ID, w, sess.SnapshotDir())
	return nil
}
