package flush

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/frontend/diff"
)

// benchFiles is the number of changed files of BenchmarkApply (the performance target is
// stated for 1,000 files: apply ≤ 3× `cp` + `sync` of the same files).
const benchFiles = 1000

// benchTree makes W with benchFiles source-like files (1–16 KiB in 20 directories), a
// snapshot whose copies of all of them are modified, and the items of those changes.
func benchTree(b *testing.B) (*fixture, []Item) {
	b.Helper()
	w := filepath.Join(b.TempDir(), "w")
	for i := 0; i < benchFiles; i++ {
		size := 1024 + (i*7919)%(15*1024)
		put(b, w, fmt.Sprintf("pkg%02d/file%04d.go", i%20, i), strings.Repeat("w", size), 0o644)
	}
	f := snapshotOf(b, w)
	its := make([]Item, 0, benchFiles)
	for i := 0; i < benchFiles; i++ {
		p := fmt.Sprintf("pkg%02d/file%04d.go", i%20, i)
		size := 1024 + (i*7919)%(15*1024)
		put(b, f.S, p, strings.Repeat("s", size), 0o644)
		its = append(its, Item{Change: f.change(diff.KindModified, p)})
	}
	return f, its
}

// BenchmarkApply measures Apply of 1,000 modified files ("flush") and, on an identical
// tree, `cp -a S/. W/` followed by `sync` ("cp-sync"); scripts/bench-apply.sh prints the
// ratio of the two from one run.
func BenchmarkApply(b *testing.B) {
	b.Run("flush", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			b.Setenv("BROOD_STATE_DIR", b.TempDir())
			f, its := benchTree(b)
			exec.Command("sync").Run()
			b.StartTimer()
			res, err := Apply(ctx, f.sess, f.m, its, Options{})
			if err != nil || len(res.Applied) != benchFiles {
				b.Fatalf("Apply: %v (%d applied)", err, len(res.Applied))
			}
		}
	})
	b.Run("cp-sync", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			b.Setenv("BROOD_STATE_DIR", b.TempDir())
			f, _ := benchTree(b)
			exec.Command("sync").Run()
			b.StartTimer()
			if out, err := exec.Command("cp", "-a", f.S+"/.", f.W+"/").CombinedOutput(); err != nil {
				b.Fatalf("cp: %v %s", err, out)
			}
			if err := exec.Command("sync").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Sparse benchmark file: 1 GiB apparent size, 8 data extents of 512 KiB (4 MiB of data).
const (
	benchSparseSize   = 1 << 30
	benchSparseChunks = 8
)

// BenchmarkApplySparse measures Apply of one modified 1 GiB sparse file with 4 MiB of
// data ("flush": the plan's checks, the journal, an extent copy, then the content digest
// of the written file, its data read back and its holes skipped (package digest), checked
// against the reviewed digest, and fsync) against `cp --sparse=always` of the same file
// ("cp-sparse") and the same followed by `sync FILE` ("cp-sparse-sync"), all in the temp
// directory; scripts/bench-apply.sh prints the ratios.
func BenchmarkApplySparse(b *testing.B) {
	src := filepath.Join(b.TempDir(), "disk.img")
	makeSparse(b, src, benchSparseSize, benchSparseChunks)
	newHash, err := diff.HashFile(src) // digest.File: the hole is not read
	if err != nil {
		b.Fatal(err)
	}
	setup := func(b *testing.B) *fixture {
		b.StopTimer()
		defer b.StartTimer()
		root := b.TempDir()
		b.Setenv("BROOD_STATE_DIR", filepath.Join(root, "state"))
		w := filepath.Join(root, "w")
		put(b, w, "disk.img", "old\n", 0o644)
		f := snapshotOf(b, w)
		os.Remove(filepath.Join(f.S, "disk.img"))
		if out, err := exec.Command("cp", "--sparse=always", src, filepath.Join(f.S, "disk.img")).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v %s", err, out)
		}
		exec.Command("sync").Run()
		return f
	}
	b.Run("flush", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			f := setup(b)
			c := diff.Change{Path: "disk.img", Kind: diff.KindModified, NewMode: 0o644, NewHash: newHash,
				OldMode: 0o644, OldHash: sum([]byte("old\n"))}
			res, err := Apply(ctx, f.sess, f.m, items(c), Options{})
			if err != nil || len(res.Applied) != 1 {
				b.Fatalf("Apply: %v %+v", err, res)
			}
		}
	})
	for _, sync := range []bool{false, true} {
		name := "cp-sparse"
		if sync {
			name += "-sync"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				f := setup(b)
				dst := filepath.Join(f.W, "disk.img")
				if out, err := exec.Command("cp", "--sparse=always", filepath.Join(f.S, "disk.img"), dst).CombinedOutput(); err != nil {
					b.Fatalf("cp: %v %s", err, out)
				}
				if sync {
					if err := exec.Command("sync", dst).Run(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
