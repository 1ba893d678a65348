package tlsterm

import (
	"bytes"
	"io"
)

// scrubReader replaces, in a response body as it streams, every real value of list by
// its placeholder, so a bound host that echoes a credential does not hand it to the
// guest. Of what it has read it holds back only a tail that could begin a real value
// (a proper prefix of one), so a stream whose chunks end otherwise (server-sent events
// end in a blank line) is not delayed. It sees identity-coded bodies only: a compressed
// response passes as it is (docs/secrets.md says what is not inspected).
type scrubReader struct {
	r     io.ReadCloser
	list  []binding
	buf   []byte // read and scrubbed, not yet released
	ready int    // leading bytes of buf that may be released
	eof   bool
	err   error
	chunk []byte // one read's buffer, reused
}

func newScrubReader(r io.ReadCloser, list []binding) *scrubReader {
	return &scrubReader{r: r, list: list, chunk: make([]byte, 32<<10)}
}

func (s *scrubReader) Read(p []byte) (int, error) {
	for s.ready == 0 {
		if s.eof || s.err != nil {
			if len(s.buf) > 0 {
				s.ready = len(s.buf)
				break
			}
			if s.err != nil {
				return 0, s.err
			}
			return 0, io.EOF
		}
		s.fill()
	}
	n := copy(p, s.buf[:s.ready])
	s.buf = s.buf[n:]
	s.ready -= n
	return n, nil
}

func (s *scrubReader) fill() {
	n, err := s.r.Read(s.chunk)
	s.buf = append(s.buf, s.chunk[:n]...)
	if err == io.EOF {
		s.eof = true
	} else if err != nil {
		s.err = err
	}
	for _, b := range s.list {
		if bytes.Contains(s.buf, []byte(b.value)) {
			s.buf = bytes.ReplaceAll(s.buf, []byte(b.value), []byte(b.placeholder))
		}
	}
	s.ready = len(s.buf)
	if !s.eof && s.err == nil {
		s.ready -= partialTail(s.buf, s.list)
	}
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
