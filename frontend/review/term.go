package review

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"golang.org/x/term"
)

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// ColorOK reports whether output to f may be colored: f is a terminal, NO_COLOR
// (no-color.org) is unset or empty, and TERM is not "dumb".
func ColorOK(f *os.File) bool {
	return IsTerminal(f) && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
}

// Terminal is a terminal put in raw mode (golang.org/x/term.MakeRaw) so that the review
// reads single key presses without Enter, sees Ctrl-C as a key (so it can abort cleanly
// and restore the terminal), and echoes nothing by itself.
type Terminal struct {
	in    *os.File
	state *term.State
	// Out writes to the terminal, turning "\n" into "\r\n" (raw mode turns off the
	// kernel's output processing, OPOST/ONLCR).
	Out io.Writer
}

// OpenTerminal puts in (a terminal) in raw mode; output goes to out. Call Restore when done.
func OpenTerminal(in, out *os.File) (*Terminal, error) {
	st, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		return nil, fmt.Errorf("set raw mode on %s: %w", in.Name(), err)
	}
	return &Terminal{in: in, state: st, Out: crlfWriter{out}}, nil
}

// Read reads key presses.
func (t *Terminal) Read(p []byte) (int, error) { return t.in.Read(p) }

// FlushTerminalInput discards what terminal f received and nobody read yet (tcflush
// TCIFLUSH); for line-based questions on a terminal, as Terminal.FlushInput is for keys.
// f that is no terminal is left alone.
func FlushTerminalInput(f *os.File) error {
	if !IsTerminal(f) {
		return nil
	}
	if err := flushInput(int(f.Fd())); err != nil {
		return fmt.Errorf("flush input of terminal %s: %w", f.Name(), err)
	}
	return nil
}

// FlushInput discards what the terminal sent that was not read yet: keys typed ahead and
// the terminal's late replies to queries the agent's session made (a colour or
// status-string report holds letters the review would take for answers). The review
// calls it before each prompt.
func (t *Terminal) FlushInput() error {
	if err := flushInput(int(t.in.Fd())); err != nil {
		return fmt.Errorf("flush input of terminal %s: %w", t.in.Name(), err)
	}
	return nil
}

// Restore puts the terminal back in the mode it had before OpenTerminal.
func (t *Terminal) Restore() error {
	if err := term.Restore(int(t.in.Fd()), t.state); err != nil {
		return fmt.Errorf("restore terminal %s: %w", t.in.Name(), err)
	}
	return nil
}

// crlfWriter writes "\r\n" for every "\n".
type crlfWriter struct{ w io.Writer }

func (c crlfWriter) Write(p []byte) (int, error) {
	if _, err := c.w.Write(bytes.ReplaceAll(p, []byte("\n"), []byte("\r\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}
