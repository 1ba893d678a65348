package tlsterm

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
)

// swapText returns text with each placeholder that may be swapped there (swappable:
// bound to host; a refresh token only where token is set) replaced by esc(real value)
// (esc nil: as it is), the bindings swapped, and the first binding found in text that may
// not (nil when none). On such a find, out is not meaningful.
func swapText(text string, list []binding, host string, token bool, esc func(string) string) (out string, swapped []*binding, foreign *binding) {
	out = text
	for i := range list {
		b := &list[i]
		if !strings.Contains(out, b.placeholder) {
			continue
		}
		if !b.swappable(host, token) {
			return text, nil, b
		}
		v := b.value
		if esc != nil {
			v = esc(v)
		}
		out = strings.ReplaceAll(out, b.placeholder, v)
		swapped = append(swapped, b)
	}
	return out, swapped, nil
}

// findAny returns the first binding of list whose placeholder occurs in data.
func findAny(data []byte, list []binding) *binding {
	for i := range list {
		if bytes.Contains(data, []byte(list[i].placeholder)) {
			return &list[i]
		}
	}
	return nil
}

// scanReader passes a request body through while it looks for the placeholders of list
// (those bound elsewhere): of what it has read it releases all but the last hold bytes
// (the longest placeholder less one), so every occurrence is seen whole before any of its
// bytes is released. On a find, Read returns errBlocked and found names the binding.
type scanReader struct {
	r     io.ReadCloser
	list  []binding
	hold  int
	room  int    // the least free space a read gets, in bytes
	buf   []byte // read, scanned, not yet released
	ready int    // how many leading bytes of buf may be released
	eof   bool
	err   error
	found *binding
	hit   atomic.Bool
}

// scanRoom is the free space of a scanReader's read when the body's size is unknown or
// large, in bytes.
const scanRoom = 32 << 10

// newScanReader returns a scanReader over r for the placeholders of list, the longest
// maxLen bytes long; size is the body's declared length (-1: unknown), which only sizes
// the buffer (a small body gets a small one), so a wrong one costs reads, not checks.
func newScanReader(r io.ReadCloser, list []binding, maxLen int, size int64) *scanReader {
	room := scanRoom
	if size >= 0 && size < scanRoom {
		room = int(size) + 1 // room for the end of the body to show as EOF
	}
	return &scanReader{r: r, list: list, hold: max(maxLen-1, 0), room: room}
}

func (s *scanReader) Read(p []byte) (int, error) {
	for s.ready == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if s.eof {
			if len(s.buf) == 0 {
				return 0, io.EOF
			}
			s.ready = len(s.buf)
			break
		}
		s.fill()
	}
	n := copy(p, s.buf[:s.ready])
	s.buf = s.buf[n:]
	s.ready -= n
	return n, nil
}

// fill reads once more, scans what is held and sets what may be released.
func (s *scanReader) fill() {
	start := len(s.buf)
	if cap(s.buf)-start < s.room {
		nb := make([]byte, start, start+2*s.room)
		copy(nb, s.buf)
		s.buf = nb
	}
	n, err := s.r.Read(s.buf[start:cap(s.buf)])
	s.buf = s.buf[:start+n]
	switch {
	case err == io.EOF:
		s.eof = true
	case err != nil:
		s.err = err
		return
	}
	if b := findAny(s.buf, s.list); b != nil {
		s.found, s.err, s.buf = b, errBlocked, nil
		s.hit.Store(true)
		return
	}
	if s.eof {
		s.ready = len(s.buf)
	} else {
		s.ready = max(len(s.buf)-s.hold, 0)
	}
}

func (s *scanReader) Close() error { return s.r.Close() }

// blocked reports whether the scanner found a placeholder. It is safe to call from
// another goroutine than the reader's.
func (s *scanReader) blocked() bool { return s.hit.Load() }

// errUndecodable marks a compressed body that cannot be inspected.
var errUndecodable = errors.New("body cannot be inspected")

// decodeBody returns data decoded by the HTTP content coding enc (RFC 9110 section 8.4.1:
// gzip, deflate (zlib), zstd, or identity), at most limit bytes. It returns an error
// wrapping errUndecodable for another coding, a list of codings, a decoding error or a
// result over limit.
func decodeBody(enc string, data []byte, limit int64) ([]byte, error) {
	var r io.Reader
	var err error
	switch strings.ToLower(strings.TrimSpace(enc)) {
	case "", "identity":
		return data, nil
	case "gzip", "x-gzip":
		r, err = gzip.NewReader(bytes.NewReader(data))
	case "deflate":
		r, err = zlib.NewReader(bytes.NewReader(data))
	case "zstd":
		var d *zstd.Decoder
		// The window (RFC 8878 section 3.1.1.1.2) bounds the decoder's memory; 8 MiB is
		// what the format recommends decoders support.
		d, err = zstd.NewReader(bytes.NewReader(data), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(8<<20))
		if err == nil {
			defer d.Close()
			r = d
		}
	default:
		return nil, fmt.Errorf("content coding %q: %w", enc, errUndecodable)
	}
	if err != nil {
		return nil, fmt.Errorf("decode %s body: %w: %v", enc, errUndecodable, err)
	}
	out, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("decode %s body: %w: %v", enc, errUndecodable, err)
	}
	if int64(len(out)) > limit {
		return nil, fmt.Errorf("decoded %s body over %d bytes: %w", enc, limit, errUndecodable)
	}
	return out, nil
}
