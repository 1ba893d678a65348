package gitreview

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// The fixture of scripts/bench-gitreview.sh: W holds one commit of benchFiles files, S
// (a copy of W) benchCommits more commits on master, each changing one file. Sizes come
// from BROOD_BENCH_FILES and BROOD_BENCH_COMMITS (default 10000 and 500).
var (
	benchOnce sync.Once
	benchW    string
	benchS    string
	benchErr  error
)

func benchEnv(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// fastImport feeds stream to git fast-import in the repository dir.
func fastImport(dir string, stream []byte) error {
	cmd := exec.Command("git", "-C", dir, "fast-import", "--quiet")
	cmd.Stdin = bytes.NewReader(stream)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("fast-import: %v %s", err, out)
	}
	return nil
}

func benchFixture(b *testing.B) (w, s string) {
	b.Helper()
	benchOnce.Do(func() {
		files, commits := benchEnv("BROOD_BENCH_FILES", 10000), benchEnv("BROOD_BENCH_COMMITS", 500)
		base, err := os.MkdirTemp("", "bench-gitreview-")
		if err != nil {
			benchErr = err
			return
		}
		benchW, benchS = filepath.Join(base, "w"), filepath.Join(base, "s")
		if out, err := exec.Command("git", "init", "-q", "-b", "master", benchW).CombinedOutput(); err != nil {
			benchErr = fmt.Errorf("git init: %v %s", err, out)
			return
		}
		var st bytes.Buffer
		st.WriteString("commit refs/heads/master\ncommitter Dev <dev@example.com> 1767225600 +0000\ndata 4\ninit\n")
		for i := range files {
			c := fmt.Sprintf("file %d\nline 2\nline 3\n", i)
			fmt.Fprintf(&st, "M 100644 inline d%03d/f%05d.txt\ndata %d\n%s", i%100, i, len(c), c)
		}
		if benchErr = fastImport(benchW, st.Bytes()); benchErr != nil {
			return
		}
		if out, err := exec.Command("cp", "-a", benchW, benchS).CombinedOutput(); err != nil {
			benchErr = fmt.Errorf("cp: %v %s", err, out)
			return
		}
		st.Reset()
		for i := range commits {
			f := (i * 7919) % files
			c := fmt.Sprintf("file %d\nline 2 changed by commit %d\nline 3\n", f, i)
			fmt.Fprintf(&st, "commit refs/heads/master\ncommitter Agent <agent@vm> %d +0000\ndata 11\nagent %04d\n", 1767225601+i, i)
			if i == 0 {
				st.WriteString("from refs/heads/master^0\n")
			}
			fmt.Fprintf(&st, "M 100644 inline d%03d/f%05d.txt\ndata %d\n%s", f%100, f, len(c), c)
		}
		benchErr = fastImport(benchS, st.Bytes())
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchW, benchS
}

// freshW copies W's repository (the one an apply or fetch writes into) for one iteration.
func freshW(b *testing.B, w string) string {
	b.Helper()
	d := filepath.Join(b.TempDir(), "w")
	if out, err := exec.Command("cp", "-a", w, d).CombinedOutput(); err != nil {
		b.Fatalf("cp: %v %s", err, out)
	}
	return d
}

// BenchmarkReviewApply: Inspect (verify and check every new object, diffstat of every
// commit) and Apply (write the objects, create the branch) of the fixture's commits.
func BenchmarkReviewApply(b *testing.B) {
	w, s := benchFixture(b)
	for b.Loop() {
		b.StopTimer()
		d := freshW(b, w)
		b.StartTimer()
		r, err := Inspect(d, s)
		if err != nil || len(r.Refs) != 1 || r.Refs[0].Refused != "" {
			b.Fatalf("review: %+v %v", r, err)
		}
		if err := r.Apply(&r.Refs[0], BranchName("bench", r.Refs[0].Name), noJournal); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(len(r.Refs[0].Commits)), "commits")
	}
}

// BenchmarkGitFetch: git fetch of the same commits from S into a copy of W (the
// reference the review is compared with; git runs only here).
func BenchmarkGitFetch(b *testing.B) {
	w, s := benchFixture(b)
	for b.Loop() {
		b.StopTimer()
		d := freshW(b, w)
		b.StartTimer()
		if out, err := exec.Command("git", "-C", d, "fetch", "-q", s, "master:refs/heads/fetched").CombinedOutput(); err != nil {
			b.Fatalf("fetch: %v %s", err, out)
		}
	}
}
