package review

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/diff"
)

// ptyOut collects what the review writes to a pseudo-terminal's master.
type ptyOut struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	more chan struct{}
}

func (p *ptyOut) copy(r io.Reader) {
	b := make([]byte, 4096)
	for {
		n, err := r.Read(b)
		p.mu.Lock()
		p.buf.Write(b[:n])
		p.mu.Unlock()
		select {
		case p.more <- struct{}{}:
		default:
		}
		if err != nil {
			close(p.more)
			return
		}
	}
}

// reviewResult is what Interactive.Run returned.
type reviewResult struct {
	ds  []Decision
	ok  bool
	err error
}

// wait blocks until the screen holds want n times; it fails when the review ends first
// (it took a decision from bytes that were not the developer's), and after a minute
// (a hang guard: the review waits for more keys after taking a wrong one).
func (p *ptyOut) wait(t *testing.T, want string, n int, done <-chan reviewResult) {
	t.Helper()
	guard := time.After(time.Minute)
	for {
		p.mu.Lock()
		got := strings.Count(p.buf.String(), want)
		screen := p.buf.String()
		p.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case _, ok := <-p.more:
			if !ok {
				t.Fatalf("terminal closed before showing %q:\n%q", want, screen)
			}
		case <-guard:
			t.Fatalf("the screen does not show %q after a minute:\n%q", want, screen)
		case r := <-done:
			t.Fatalf("review ended (%+v, confirmed %v, %v) before showing %q:\n%q", r.ds, r.ok, r.err, want, screen)
		}
	}
}

// queued blocks until the terminal tty has at least n bytes of input waiting to be read
// (TIOCINQ): the pty hands input to the line discipline asynchronously.
func queued(t *testing.T, tty *os.File, n int) {
	t.Helper()
	for {
		got, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCINQ)
		if err != nil {
			t.Fatalf("TIOCINQ: %v", err)
		}
		if got >= n {
			return
		}
		time.Sleep(time.Millisecond) // polls a condition; asserts nothing about time
	}
}

// TestTerminalRepliesAreNotKeys reviews one change on a real pseudo-terminal (creack/pty)
// that receives what a terminal sends after an agent's session that queried it: before the
// first prompt, the tail of a DECRQSS reply (its head read by the session; it holds 'r'
// and 'y', reject and yes) and an OSC 11 colour reply; after each prompt, complete DCS,
// OSC, APC and 8-bit replies full of 'r' and 'y' before the developer's key. The
// decisions are the developer's keys only: 'a' (accept) for the change, 'n' at the final
// confirmation. Without the flush the tail's 'r' rejects the change; without the string
// skipping a reply's 'r' or 'y' is the answer.
func TestTerminalRepliesAreNotKeys(t *testing.T) {
	f := newFixture(t)
	c := f.modified("a.txt", "one\n", "two\n")
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	term, err := OpenTerminal(tty, tty)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Restore()
	scr := &ptyOut{more: make(chan struct{}, 1)}
	go scr.copy(ptmx)

	stale := "1$r0;1my\x1b\\" + "\x1b]11;rgb:1e1e/1e1e/1e1e\x1b\\"
	if _, err := ptmx.Write([]byte(stale)); err != nil {
		t.Fatal(err)
	}
	queued(t, tty, len(stale))

	done := make(chan reviewResult, 1)
	go func() {
		s := &Interactive{Changes: []diff.Change{c}, Trees: f.trees, In: term, Out: term.Out}
		ds, ok, err := s.Run()
		done <- reviewResult{ds, ok, err}
	}()
	replies := "\x1bP>|ry-term(1.0)\x1b\\" + "\x1bP1$r0;1m\x1b\\" + "\x1b]11;rgb:ffff/ffff/ffff\x07" +
		"\x1b_Gi=1;ry\x1b\\" + "\x90ry\x9c" + "\xc2\x9d11;ry\xc2\x9c" + "\x1b[?1;2c"
	scr.wait(t, "[1/1]", 1, done)
	scr.wait(t, "?]? ", 1, done) // the change's prompt, printed after its diff
	if _, err := ptmx.Write([]byte(replies + "a")); err != nil {
		t.Fatal(err)
	}
	scr.wait(t, "Apply 1 change(s)", 1, done)
	if _, err := ptmx.Write([]byte(replies + "n")); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("review: %v", r.err)
	}
	if len(r.ds) != 1 || r.ds[0].Verdict != Accept || r.ok {
		t.Fatalf("decisions %+v, confirmed %v; want accept, not confirmed", r.ds, r.ok)
	}
}
