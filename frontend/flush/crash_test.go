package flush

import (
	"encoding/gob"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/session"
)

// Environment of the re-executed child that applies and kills itself at a hook point.
const (
	envChild  = "BROOD_FLUSH_CRASH_CHILD" // session id
	envPoint  = "BROOD_FLUSH_CRASH_POINT"
	envN      = "BROOD_FLUSH_CRASH_N"
	itemsFile = "crash-items.gob"
	nModified = 12
	nAdded    = 6
	nDeleted  = 6
)

func TestMain(m *testing.M) {
	if id := os.Getenv(envChild); id != "" {
		os.Exit(crashChild(id))
	}
	os.Exit(m.Run())
}

// crashChild applies the items stored in the session and SIGKILLs itself when the hook
// point is reached with a counter >= N. Exit 0 means the point was never reached.
func crashChild(id string) int {
	sess, err := session.Open(id)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 10
	}
	m, err := manifest.Read(sess.ManifestPath())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 11
	}
	fh, err := os.Open(filepath.Join(sess.Dir, itemsFile))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 12
	}
	var its []Item
	if err := gob.NewDecoder(fh).Decode(&its); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 13
	}
	point := os.Getenv(envPoint)
	n, _ := strconv.Atoi(os.Getenv(envN))
	testHook = func(p string, i int) {
		if p == point && i >= n {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	if _, err := Apply(ctx, sess, m, its, Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 14
	}
	return 0
}

// crashFixture has nModified modified files (a hunk-selected one among them), nAdded added
// files in a new directory and nDeleted deleted files; it returns the fixture, the items
// and the expected W after a complete apply.
func crashFixture(t *testing.T) (*fixture, []Item, map[string]string) {
	files := map[string]string{}
	for i := 0; i < nModified; i++ {
		files[fmt.Sprintf("m/%02d.txt", i)] = strings.Repeat(fmt.Sprintf("old %d\n", i), 200)
	}
	for i := 0; i < nDeleted; i++ {
		files[fmt.Sprintf("d%02d.txt", i)] = fmt.Sprintf("doomed %d\n", i)
	}
	f := newFixture(t, files)
	var its []Item
	for i := 0; i < nModified; i++ {
		p := fmt.Sprintf("m/%02d.txt", i)
		put(t, f.S, p, strings.Repeat(fmt.Sprintf("new %d\n", i), 300), 0o644)
		it := Item{Change: f.change(diff.KindModified, p)}
		if i == 3 {
			it.Content = []byte("hunk-selected\n")
		}
		its = append(its, it)
	}
	for i := 0; i < nAdded; i++ {
		p := fmt.Sprintf("new/dir/%02d.txt", i)
		put(t, f.S, p, fmt.Sprintf("added %d\n", i), 0o644)
		its = append(its, Item{Change: f.change(diff.KindAdded, p)})
	}
	for i := 0; i < nDeleted; i++ {
		p := fmt.Sprintf("d%02d.txt", i)
		os.Remove(filepath.Join(f.S, p))
		its = append(its, Item{Change: f.change(diff.KindDeleted, p)})
	}
	// Expected W after the apply: S, except the hunk selection.
	want := treeState(t, f.S)
	want["m/03.txt"] = "-rw-r--r--:hunk-selected\n"
	if err := manifest.Write(f.sess.ManifestPath(), f.m); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Create(filepath.Join(f.sess.Dir, itemsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := gob.NewEncoder(fh).Encode(its); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	return f, its, want
}

// TestKilledApply kills a re-executed apply (SIGKILL) at several points — mid-journal,
// after some deletions, after staging, after N renames, after the commit — and checks
// that every path is then old or new (never partial), and that Undo and a re-run of the
// apply (after Recover) both reach a consistent W.
func TestKilledApply(t *testing.T) {
	points := []struct {
		point string
		n     int
		mixed bool // the kill leaves some paths new and some old
	}{
		{"journal-plan", 0, false},
		{"journal", 5, false},
		{"removed", 2, true},
		{"staged", 0, true},
		{"renamed", 10, true},
		{"renamed", 20, true},
		{"committed", 0, false},
	}
	for _, pt := range points {
		for _, then := range []string{"undo", "reapply"} {
			t.Run(fmt.Sprintf("%s-%d-%s", pt.point, pt.n, then), func(t *testing.T) {
				f, its, want := crashFixture(t)
				before := treeState(t, f.W)
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), envChild+"="+f.sess.ID, envPoint+"="+pt.point, envN+"="+strconv.Itoa(pt.n))
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("child was not killed at %s %d: %v\n%s", pt.point, pt.n, err, out)
				}
				// Every path is old or new, never partial; temp files are allowed until recovery.
				got := treeState(t, f.W)
				nNew, nOld := 0, 0
				for p := range union(before, want) {
					if strings.Contains(p, ".brood-") {
						continue
					}
					switch got[p] {
					case want[p]:
						nNew++
					case before[p]:
						nOld++
					default:
						if _, isDir := want[p]; !(isDir && strings.HasPrefix(want[p], "dir:")) {
							t.Errorf("%s after kill: %q is neither old %q nor new %q", p, got[p], before[p], want[p])
						}
					}
				}
				if pt.mixed && (nNew == 0 || nOld == 0) {
					t.Errorf("kill at %s %d left %d new and %d old paths, want a mix", pt.point, pt.n, nNew, nOld)
				}
				switch then {
				case "undo":
					if _, err := Undo(ctx, f.sess); err != nil {
						t.Fatalf("Undo: %v", err)
					}
					sameTree(t, before, treeState(t, f.W))
				case "reapply":
					if _, err := Apply(ctx, f.sess, f.m, its, Options{}); pt.point != "committed" && !errors.Is(err, ErrInterrupted) {
						t.Fatalf("Apply before Recover: %v, want ErrInterrupted", err)
					}
					if pt.point == "committed" {
						sameTree(t, want, treeState(t, f.W))
						return
					}
					if _, err := Recover(ctx, f.sess); err != nil {
						t.Fatalf("Recover: %v", err)
					}
					sameTree(t, before, treeState(t, f.W))
					if _, err := Apply(ctx, f.sess, f.m, its, Options{}); err != nil {
						t.Fatalf("Apply after Recover: %v", err)
					}
					sameTree(t, want, treeState(t, f.W))
				}
			})
		}
	}
}

func union(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
