package tlsterm

import (
	"bytes"
	"io"
)

// Buffer sizes of a scrubReader, in bytes: a read whose buffer has less room than
// scrubMinRead after the held bytes goes to the reader's own buffer of scrubScratch bytes
// (more when a real value is longer) instead of the caller's.
const (
	scrubMinRead = 4 << 10
	scrubScratch = 32 << 10
)

// scrubReader replaces, in a response body as it streams, every real value of list by
// its placeholder, so a bound host that echoes a credential does not hand it to the
// guest. Of what it has read it holds back only a tail that could begin a real value
// (a proper prefix of one), so a stream whose chunks end otherwise (server-sent events
// end in a blank line) is not delayed. It reads straight into the caller's buffer and
// scans it there; only a read that holds a real value is copied (to be rewritten). It
// sees identity-coded bodies only: a compressed response passes as it is
// (docs/secrets.md says what is not inspected).
type scrubReader struct {
	r       io.ReadCloser
	list    []binding
	longest int    // the longest real value of list, in bytes
	held    []byte // scrubbed tail that could begin a real value: not yet released
	out     []byte // scrubbed, released, not yet returned
	scratch []byte // the buffer of reads too small to scan in place
	eof     bool
	err     error
}

func newScrubReader(r io.ReadCloser, list []binding) *scrubReader {
	s := &scrubReader{r: r, list: list}
	for _, b := range list {
		s.longest = max(s.longest, len(b.value))
	}
	return s
}

func (s *scrubReader) Read(p []byte) (int, error) {
	for {
		if len(s.out) > 0 {
			n := copy(p, s.out)
			s.out = s.out[n:]
			return n, nil
		}
		if s.eof || s.err != nil {
			if len(s.held) > 0 {
				s.out, s.held = s.held, nil
				continue
			}
			if s.err != nil {
				return 0, s.err
			}
			return 0, io.EOF
		}
		if len(p) == 0 {
			return 0, nil
		}
		if n := s.fill(p); n > 0 {
			return n, nil
		}
	}
}

// fill reads once, after the held bytes, into p (or into scratch when p is too small to
// hold them and a useful read), scrubs what it has, holds back its partial tail and
// returns how many leading bytes of p are released; bytes released elsewhere wait in
// out.
func (s *scrubReader) fill(p []byte) int {
	dst := p
	if len(p) < len(s.held)+scrubMinRead {
		if s.scratch == nil {
			s.scratch = make([]byte, max(scrubScratch, s.longest+scrubMinRead))
		}
		dst = s.scratch
	}
	k := copy(dst, s.held)
	n, err := s.r.Read(dst[k:])
	if err == io.EOF {
		s.eof = true
	} else if err != nil {
		s.err = err
	}
	data := dst[:k+n]
	inPlace := &dst[0] == &p[0]
	if s.holdsValue(data) {
		for _, b := range s.list {
			data = bytes.ReplaceAll(data, []byte(b.value), []byte(b.placeholder))
		}
		inPlace = false // the rewritten bytes are a new slice, maybe longer than p
	}
	tail := 0
	if !s.eof && s.err == nil {
		tail = partialTail(data, s.list)
	}
	s.held = append(s.held[:0], data[len(data)-tail:]...)
	data = data[:len(data)-tail]
	if inPlace {
		return len(data)
	}
	s.out = data
	return 0
}

// holdsValue reports whether data holds a real value of list.
func (s *scrubReader) holdsValue(data []byte) bool {
	for _, b := range s.list {
		if bytes.Contains(data, []byte(b.value)) {
			return true
		}
	}
	return false
}

// partialTail returns the length of the longest tail of buf that is a proper prefix of a
// real value of list.
func partialTail(buf []byte, list []binding) int {
	longest := 0
	for _, b := range list {
		v := []byte(b.value)
		from := max(len(buf)-len(v)+1, 0)
		for i := from; i < len(buf); i++ {
			j := bytes.IndexByte(buf[i:], v[0])
			if j < 0 {
				break
			}
			i += j
			if len(buf)-i > longest && bytes.HasPrefix(v, buf[i:]) {
				longest = len(buf) - i
				break
			}
		}
	}
	return longest
}

func (s *scrubReader) Close() error { return s.r.Close() }
