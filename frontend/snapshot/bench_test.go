package snapshot

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// makeSourceTree writes n source-like files (sizes 200 B–32 KiB, skewed small, 20 per
// directory, 3 levels) under root.
func makeSourceTree(tb testing.TB, root string, n int) {
	tb.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	line := "\tif err := frobnicate(ctx, x, y); err != nil { return fmt.Errorf(\"frob %q: %w\", x, err) }\n"
	for i := 0; i < n; i++ {
		d := filepath.Join(root, fmt.Sprintf("pkg%02d/sub%02d/leaf%03d", i/2000, i/200%10, i/20%10))
		if i%20 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				tb.Fatal(err)
			}
		}
		size := 200 + int(r.ExpFloat64()*4000)
		size = min(size, 32<<10)
		body := strings.Repeat(line, size/len(line)+1)[:size]
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d.go", i)), []byte(body), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkTake snapshots a 5,000-file source tree; the cp-a sub-benchmark copies the
// same tree with `cp -a --reflink=auto` for comparison (scripts/bench-snapshot.sh
// prints the ratio for 50,000 files).
func BenchmarkTake(b *testing.B) {
	w := filepath.Join(b.TempDir(), "w")
	makeSourceTree(b, w, 5000)
	out := b.TempDir()
	i := 0
	next := func() string { i++; return filepath.Join(out, fmt.Sprint(i)) }
	b.Run("take", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := Take(context.Background(), w, next(), Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("take-keepbase", func(b *testing.B) {
		for b.Loop() {
			d := next()
			os.Mkdir(d, 0o700)
			if _, _, err := Take(context.Background(), w, d+"/s", Options{KeepBase: true, BaseDir: d + "/base"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cp-a", func(b *testing.B) {
		for b.Loop() {
			if out, err := exec.Command("cp", "-a", "--reflink=auto", w, next()).CombinedOutput(); err != nil {
				b.Fatalf("cp: %v %s", err, out)
			}
		}
	})
}
