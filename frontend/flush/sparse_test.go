package flush

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/internal/testenv"
)

const (
	sparseSize   = 256 << 20 // apparent size of the sparse test files
	sparseChunks = 8         // 512 KiB data extents in them: 4 MiB of data
)

// TestApplyKeepsHoles applies a modified and an added 256 MiB sparse file (4 MiB of
// data) on the temp filesystem (no reflink: extent copy), on ext4 (extent copy with
// copy_file_range) and on btrfs and xfs (FICLONE): each lands with about the blocks of
// its source and the reviewed content, and undo restores the prior state.
func TestApplyKeepsHoles(t *testing.T) {
	for _, fs := range []struct {
		name, mkfs string
		args       []string
		reflink    bool
	}{
		{name: "tmp"},
		{name: "ext4", mkfs: "mkfs.ext4", args: []string{"-q"}},
		{name: "btrfs", mkfs: "mkfs.btrfs", args: []string{"-q"}, reflink: true},
		{name: "xfs", mkfs: "mkfs.xfs", args: []string{"-q", "-m", "reflink=1"}, reflink: true},
	} {
		t.Run(fs.name, func(t *testing.T) {
			root := t.TempDir()
			if fs.mkfs != "" {
				root = mountLoop(t, fs.mkfs, "", fs.args...)
			}
			f := fixtureIn(t, root, map[string]string{"disk.img": "old\n"})
			makeSparse(t, filepath.Join(f.S, "disk.img"), sparseSize, sparseChunks)
			makeSparse(t, filepath.Join(f.S, "new.img"), sparseSize, sparseChunks)
			if allocated(t, filepath.Join(f.S, "disk.img")) > 8<<20 {
				testenv.Skip(t, fs.name+" does not keep holes")
			}
			cs := []diff.Change{f.bigChange(t, diff.KindModified, "disk.img"), f.bigChange(t, diff.KindAdded, "new.img")}
			res, err := Apply(ctx, f.sess, f.m, items(cs...), Options{})
			if err != nil || len(res.Applied) != 2 {
				t.Fatalf("Apply: %v %+v", err, res)
			}
			for _, c := range cs {
				p := c.Path
				src, dst := filepath.Join(f.S, p), filepath.Join(f.W, p)
				if !bytes.Equal(fileSum(t, dst), c.NewHash) {
					t.Fatalf("%s: content differs from the snapshot's", p)
				}
				if a, b := allocated(t, dst), allocated(t, src); a > b+1<<20 {
					t.Errorf("%s: %d bytes allocated, the snapshot's copy %d (size %d)", p, a, b, sparseSize)
				}
				if fs.reflink {
					if total, shared := sharedExtents(t, dst); total == 0 || shared != total {
						t.Errorf("%s: %d of %d extents shared: not reflinked", p, shared, total)
					}
				}
			}
			if _, err := Undo(ctx, f.sess); err != nil {
				t.Fatal(err)
			}
			if read(t, f.W, "disk.img") != "old\n" || !absent(t, f.W, "new.img") {
				t.Fatal("undo did not restore the prior state")
			}
		})
	}
}

// TestBackupAndUndoKeepHoles replaces a sparse W file that has a second hard link (so the
// journal keeps a copy, not the inode): the copy and the file undo puts back keep holes.
func TestBackupAndUndoKeepHoles(t *testing.T) {
	root := t.TempDir()
	t.Setenv("BROOD_STATE_DIR", filepath.Join(root, "state"))
	w := filepath.Join(root, "w")
	os.Mkdir(w, 0o755)
	big := filepath.Join(w, "big.img")
	makeSparse(t, big, 64<<20, 4)
	if allocated(t, big) > 4<<20 {
		testenv.Skip(t, "the temp filesystem does not keep holes")
	}
	f := snapshotOf(t, w)
	if err := os.Link(big, filepath.Join(root, "second-link")); err != nil {
		t.Fatal(err)
	}
	before := fileSum(t, big)
	put(t, f.S, "big.img", "small now\n", 0o644)
	res, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindModified, "big.img")), Options{})
	if err != nil || len(res.Applied) != 1 {
		t.Fatalf("Apply: %v %+v", err, res)
	}
	copyPath := filepath.Join(f.sess.JournalDir(), res.Tx, backupDir)
	ents, _ := os.ReadDir(copyPath)
	if len(ents) != 1 {
		t.Fatalf("journal backups: %v", ents)
	}
	if a := allocated(t, filepath.Join(copyPath, ents[0].Name())); a > 4<<20 {
		t.Errorf("journal copy: %d bytes allocated for 2 MiB of data", a)
	}
	if _, err := Undo(ctx, f.sess); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fileSum(t, big), before) {
		t.Fatal("undo: content differs")
	}
	if a := allocated(t, big); a > 4<<20 {
		t.Errorf("restored file: %d bytes allocated for 2 MiB of data", a)
	}
}
