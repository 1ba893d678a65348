package cli

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/diff/difftest"
)

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAskRefFlushesTerminal: a line that reached the terminal before the per-ref question
// (a late terminal reply, or "y" typed ahead) is not its answer: the question discards it,
// and the developer's "n" after the question skips the branch.
func TestAskRefFlushesTerminal(t *testing.T) {
	sess, _ := gitSession(t)
	s := sess.SnapshotDir()
	difftest.WriteFiles(s, map[string]string{"a.txt": "A\n"})
	runGit(t, s, "commit", "-q", "-am", "agent work")
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if _, err := ptmx.Write([]byte("y\n")); err != nil {
		t.Fatal(err)
	}
	for { // the pty hands input to the line discipline asynchronously
		n, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCINQ)
		if err != nil {
			t.Fatal(err)
		}
		if n >= 2 {
			break
		}
		time.Sleep(time.Millisecond) // polls a condition; asserts nothing about time
	}
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- applyCommitsAfter(tty, out, sess.ID, "", true, true, nil) }()
	guard := time.After(time.Minute) // a hang guard
	for !strings.Contains(out.String(), "create branch") {
		select {
		case err := <-done:
			t.Fatalf("finished before asking: %v\n%s", err, out.String())
		case <-guard:
			t.Fatalf("not asked:\n%s", out.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	if _, err := ptmx.Write([]byte("n\n")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if got := runGit(t, sess.Workspace, "branch", "--list", "brood/*"); got != "" {
		t.Errorf("a line typed before the question created %s:\n%s", got, out.String())
	}
}
