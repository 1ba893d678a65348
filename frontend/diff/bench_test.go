package diff

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"brood.dev/brood/frontend/diff/difftest"
	"brood.dev/brood/frontend/manifest"
)

// BenchmarkDiff50k measures the diff of a 50,000-file workspace whose snapshot holds 10
// agent changes, against a bare stat walk of both trees. scripts/bench-diff.sh prints the
// ratios. Sub-benchmarks:
//
//	find            find W S -printf '%s %T@ %C@\n' > /dev/null (the reference)
//	walk            this package's parallel stat walk of W and S, nothing else
//	manifest-read   manifest.Read (gob decode) alone
//	compute         Compute with the manifest already decoded
//	compute+read    ComputeLoad with manifest.Read overlapping the walk (brood diff)
func BenchmarkDiff50k(b *testing.B) {
	dir := b.TempDir()
	w, s := filepath.Join(dir, "w"), filepath.Join(dir, "s")
	for _, d := range []string{w, s} {
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	paths, err := difftest.Tree(w, 50000)
	if err != nil {
		b.Fatal(err)
	}
	m, err := difftest.Snapshot(w, s, true)
	if err != nil {
		b.Fatal(err)
	}
	mpath := filepath.Join(dir, "manifest")
	if err := manifest.Write(mpath, m); err != nil {
		b.Fatal(err)
	}
	if err := difftest.Mutate(s, paths, 10); err != nil {
		b.Fatal(err)
	}
	check := func(b *testing.B, cs []Change) {
		if len(cs) != 10 {
			b.Fatalf("%d changes, want 10", len(cs))
		}
	}
	if find, err := exec.LookPath("find"); err == nil {
		b.Run("find", func(b *testing.B) {
			for b.Loop() {
				cmd := exec.Command(find, w, s, "-printf", `%s %T@ %C@\n`)
				if err := cmd.Run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("walk", func(b *testing.B) {
		rw, _ := openRoot("W", w)
		rs, _ := openRoot("S", s)
		defer rw.close()
		defer rs.close()
		for b.Loop() {
			var wg sync.WaitGroup
			for _, r := range []*root{rw, rs} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, _, err := walkTree(context.Background(), r, runtime.GOMAXPROCS(0)); err != nil {
						b.Error(err)
					}
				}()
			}
			wg.Wait()
		}
	})
	b.Run("manifest-read", func(b *testing.B) {
		for b.Loop() {
			if _, err := manifest.Read(mpath); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("compute", func(b *testing.B) {
		for b.Loop() {
			cs, err := Compute(context.Background(), w, s, m, Options{})
			if err != nil {
				b.Fatal(err)
			}
			check(b, cs)
		}
	})
	b.Run("compute-casefold", func(b *testing.B) {
		for b.Loop() {
			cs, err := Compute(context.Background(), w, s, m, Options{Case: CaseInsensitive})
			if err != nil {
				b.Fatal(err)
			}
			check(b, cs)
		}
	})
	b.Run("compute+read", func(b *testing.B) {
		for b.Loop() {
			cs, err := ComputeLoad(context.Background(), w, s, func() (*manifest.Manifest, error) { return manifest.Read(mpath) }, Options{})
			if err != nil {
				b.Fatal(err)
			}
			check(b, cs)
		}
	})
}
