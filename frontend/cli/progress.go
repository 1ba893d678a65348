package cli

import (
	"fmt"
	"io"
	"sync"
	"time"

	"brood.dev/brood/frontend"
)

// progress reports the steps of `brood run` on stderr: on a terminal one line per step
// with a spinner that the step's result replaces; otherwise plain lines ("brood: boot
// ... done in 1.8s"), which logs and CI keep readable.
type progress struct {
	w     io.Writer
	tty   bool
	mu    sync.Mutex
	step  string
	start time.Time
	stop  chan struct{}
	done  chan struct{}
}

var _ frontend.Progress = (*progress)(nil)

// spinnerFrames are drawn every spinnerInterval while a step runs on a terminal.
var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

const spinnerInterval = 100 * time.Millisecond

func newProgress(w io.Writer, tty bool) *progress { return &progress{w: w, tty: tty} }

// Start begins step (e.g. "snapshot"), ending a step still running as done.
func (p *progress) Start(step string) {
	p.Done("")
	p.mu.Lock()
	defer p.mu.Unlock()
	p.step, p.start = step, time.Now()
	if !p.tty {
		fmt.Fprintf(p.w, "brood: %s ...\n", step)
		return
	}
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go p.spin(step, p.stop, p.done)
}

func (p *progress) spin(step string, stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(spinnerInterval)
	defer t.Stop()
	for i := 0; ; i++ {
		p.mu.Lock()
		fmt.Fprintf(p.w, "\r\x1b[K%s %s", spinnerFrames[i%len(spinnerFrames)], step)
		p.mu.Unlock()
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// Done ends the running step (if any) with a short result ("" for "done").
func (p *progress) Done(result string) { p.finish("✓", "done", result) }

// Fail ends the running step (if any) as failed.
func (p *progress) Fail(result string) { p.finish("✗", "failed", result) }

func (p *progress) finish(mark, word, result string) {
	p.mu.Lock()
	step, stop, done := p.step, p.stop, p.done
	p.step, p.stop, p.done = "", nil, nil
	p.mu.Unlock()
	if step == "" {
		return
	}
	if stop != nil {
		close(stop)
		<-done
	}
	el := time.Since(p.start).Round(10 * time.Millisecond)
	msg := fmt.Sprintf("%s in %s", word, el)
	if result != "" {
		msg = fmt.Sprintf("%s (%s) in %s", word, result, el)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\x1b[K%s %s: %s\n", mark, step, msg)
	} else {
		fmt.Fprintf(p.w, "brood: %s %s\n", step, msg)
	}
}

// Printf prints a message line (ending a running step first so lines do not mix).
func (p *progress) Printf(format string, a ...any) {
	p.Done("")
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "brood: "+format+"\n", a...)
}

// Warn prints a loud warning line (ANSI bold red on a terminal).
func (p *progress) Warn(format string, a ...any) {
	p.Done("")
	p.mu.Lock()
	defer p.mu.Unlock()
	msg := fmt.Sprintf(format, a...)
	if p.tty {
		fmt.Fprintf(p.w, "\x1b[1;31mbrood: WARNING: %s\x1b[0m\n", msg)
	} else {
		fmt.Fprintf(p.w, "brood: WARNING: %s\n", msg)
	}
}
