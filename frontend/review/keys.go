package review

import (
	"errors"
	"fmt"
	"io"
)

// keys reads single key presses.
type keys struct {
	r   io.Reader
	p   *printer
	f   keyFilter
	buf [1]byte
}

// inputFlusher is a key source that can discard the input that is waiting to be read
// (Terminal: the terminal's replies to queries the agent's session made, which can arrive
// after it ended, and keys typed ahead).
type inputFlusher interface{ FlushInput() error }

// read discards pending input (when k.r is an inputFlusher), prints prompt, then returns
// the next key press, echoed with a newline. Enter and space are ignored; control
// sequences and strings (arrow keys, terminal replies: keyFilter) and non-ASCII characters
// are consumed and ignored; Ctrl-C, Ctrl-D and end of input return ErrAborted.
func (k *keys) read(prompt string) (byte, error) {
	if f, ok := k.r.(inputFlusher); ok {
		if err := f.FlushInput(); err != nil {
			return 0, err
		}
		k.f = keyFilter{} // what was discarded ended every sequence in progress
	}
	k.p.printf("%s", prompt)
	for {
		c, err := k.byte()
		if err != nil {
			return 0, err
		}
		if !k.f.key(c) {
			continue
		}
		switch {
		case c == 0x03 || c == 0x04: // Ctrl-C, Ctrl-D
			k.p.printf("\n")
			return 0, ErrAborted
		case c >= 0x21 && c < 0x7f:
			k.p.printf("%c\n", c)
			return c, nil
		}
	}
}

func (k *keys) byte() (byte, error) {
	n, err := k.r.Read(k.buf[:])
	if n == 1 {
		return k.buf[0], nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	if errors.Is(err, io.EOF) {
		return 0, ErrAborted
	}
	return 0, fmt.Errorf("read key: %w", err)
}

// keyFilter separates key presses from the control sequences and strings a terminal
// sends, byte by byte. The forms (ECMA-48 5th ed. §5.3 and §5.6, xterm's ctlseqs):
//
//   - CSI: ESC [ or 8-bit 0x9b, then parameter and intermediate bytes up to a final byte
//     0x40–0x7e (arrow keys; cursor-position, device-attribute and mode reports).
//   - SS3: ESC O or 8-bit 0x8f, then one byte (application-mode keys).
//   - control strings: OSC (ESC ] / 0x9d), DCS (ESC P / 0x90), APC (ESC _ / 0x9f), PM
//     (ESC ^ / 0x9e) and SOS (ESC X / 0x98), up to ST (ESC \ or 0x9c) or BEL (0x07).
//     Their content is discarded whatever it holds (an OSC 11 colour reply, a DECRQSS or
//     XTGETTCAP reply in a DCS, an OSC 52 clipboard reply); an ESC inside one that does not
//     start ST ends it and starts a new sequence, as VT parsers do. CAN and SUB do not end
//     a string here: only ST and BEL do.
//   - the 8-bit C1 forms also in their UTF-8 encoding (0xc2 0x80–0x9f), and ST as 0xc2
//     0x9c; any other C1 control alone is dropped.
//   - ESC followed by any other byte (Alt+key) is dropped with that byte.
//
// UTF-8 characters (a lead byte 0xc2–0xf4 with its continuation bytes) are not keys and
// are dropped whole, so that their continuation bytes 0x80–0x9f are not taken for C1
// controls. Ctrl-C (0x03) and Ctrl-D (0x04) are keys in every state, so the review can
// always be aborted (a control string that never ends would otherwise hold every key).
type keyFilter struct {
	st       seqState
	inString bool // stLeadC2 and stCont return to stString, not stGround
	cont     int  // stCont: continuation bytes still expected
}

// seqState is where a keyFilter is in the input.
type seqState uint8

const (
	stGround    seqState = iota // between sequences: a byte is a key
	stEsc                       // after ESC
	stCSI                       // in a CSI, until its final byte
	stSS3                       // after SS3, one byte
	stString                    // in a control string, until ST or BEL
	stStringEsc                 // ESC in a control string: ST when '\' follows
	stLeadC2                    // after 0xc2: a C1 control in UTF-8 when 0x80–0x9f follows
	stCont                      // in the continuation bytes of a UTF-8 character
)

// key feeds c and reports whether it is a key press (outside every sequence, string and
// UTF-8 character). A true result is an ASCII byte: C0 controls, space, printable or DEL.
func (f *keyFilter) key(c byte) bool {
	if c == 0x03 || c == 0x04 {
		*f = keyFilter{}
		return true
	}
	switch f.st {
	case stEsc:
		f.afterEsc(c)
	case stCSI:
		switch {
		case c == 0x1b:
			f.st = stEsc
		case c >= 0x40 && c <= 0x7e:
			f.st = stGround
		}
	case stSS3:
		f.st = stGround
		if c == 0x1b {
			f.st = stEsc
		}
	case stString:
		f.stringByte(c)
	case stStringEsc:
		if c == '\\' {
			f.st = stGround
			return false
		}
		f.afterEsc(c)
	case stLeadC2:
		return f.afterC2(c)
	case stCont:
		return f.continuation(c)
	default:
		return f.ground(c)
	}
	return false
}

// ground handles c between sequences.
func (f *keyFilter) ground(c byte) bool {
	switch {
	case c == 0x1b:
		f.st = stEsc
	case c >= 0x80 && c <= 0x9f:
		f.c1(c)
	case c >= 0x80:
		f.lead(c, false)
	default:
		return true
	}
	return false
}

// afterEsc handles the byte after ESC (7-bit forms of the C1 introducers).
func (f *keyFilter) afterEsc(c byte) {
	switch c {
	case 0x1b:
		f.st = stEsc
	case '[', 'O', ']', 'P', '_', '^', 'X':
		f.c1(c + 0x40) // ESC Fe is the C1 control Fe+0x40 (ECMA-48 §5.3)
	default:
		f.st = stGround
	}
}

// c1 starts what the C1 control c (0x80–0x9f) introduces.
func (f *keyFilter) c1(c byte) {
	switch c {
	case 0x9b:
		f.st = stCSI
	case 0x8f:
		f.st = stSS3
	case 0x9d, 0x90, 0x9f, 0x9e, 0x98:
		f.st = stString
	default:
		f.st = stGround
	}
}

// stringByte handles c inside a control string.
func (f *keyFilter) stringByte(c byte) {
	switch {
	case c == 0x07 || c == 0x9c:
		f.st = stGround
	case c == 0x1b:
		f.st = stStringEsc
	case c >= 0xc2:
		f.lead(c, true)
	}
}

// lead starts the UTF-8 character whose first byte is c (0xa0–0xff; bytes that cannot
// start one are dropped alone).
func (f *keyFilter) lead(c byte, inString bool) {
	f.inString = inString
	switch {
	case c == 0xc2:
		f.st = stLeadC2
		return
	case c >= 0xc3 && c <= 0xdf:
		f.cont = 1
	case c >= 0xe0 && c <= 0xef:
		f.cont = 2
	case c >= 0xf0 && c <= 0xf4:
		f.cont = 3
	default:
		f.back()
		return
	}
	f.st = stCont
}

// back returns to the state a UTF-8 character interrupted.
func (f *keyFilter) back() {
	f.st = stGround
	if f.inString {
		f.st = stString
	}
}

// afterC2 handles the byte after 0xc2: a C1 control in UTF-8 (0x80–0x9f), another
// character's end (0xa0–0xbf), or a byte of its own.
func (f *keyFilter) afterC2(c byte) bool {
	switch {
	case c >= 0x80 && c <= 0x9f && f.inString:
		f.back()
		if c == 0x9c {
			f.st = stGround
		}
	case c >= 0x80 && c <= 0x9f:
		f.c1(c)
	case c >= 0xa0 && c <= 0xbf:
		f.back()
	default:
		f.back()
		return f.key(c)
	}
	return false
}

// continuation handles a byte expected to continue a UTF-8 character.
func (f *keyFilter) continuation(c byte) bool {
	if c < 0x80 || c > 0xbf {
		f.back()
		return f.key(c)
	}
	if f.cont--; f.cont == 0 {
		f.back()
	}
	return false
}
