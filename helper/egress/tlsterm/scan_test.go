package tlsterm

import (
	"bytes"
	"compress/zlib"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/klauspost/compress/zstd"
)

// chunked returns a reader that returns data in reads of at most n bytes.
type chunked struct {
	data []byte
	n    int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.data))
	copy(p, c.data[:k])
	c.data = c.data[k:]
	return k, nil
}

func (c *chunked) Close() error { return nil }

// FuzzScanReader: whatever the data, however it is split into reads and whatever size
// the body claims, the scanner returns the data unchanged when no placeholder occurs in
// it, and refuses it, having released no byte of the first occurrence, when one does.
func FuzzScanReader(f *testing.F) {
	f.Add([]byte("hello world"), uint8(3), uint16(0))
	f.Add([]byte("xxPLACEHOLDER-ONE-0001yy"), uint8(1), uint16(2))
	f.Add(bytes.Repeat([]byte("PLACEHOLDER-ONE-000"), 5), uint8(7), uint16(9))
	list := []binding{{placeholder: "PLACEHOLDER-ONE-0001"}, {placeholder: "second-placeholder-0000000000002"}}
	maxLen := len(list[1].placeholder)
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8, insert uint16) {
		if len(data) > 0 && insert%3 == 0 {
			at := int(insert) % len(data)
			data = append(append(append([]byte{}, data[:at]...), list[int(insert)%2].placeholder...), data[at:]...)
		}
		s := newScanReader(&chunked{data: data, n: int(chunk%64) + 1}, list, maxLen, int64(insert%50)-1) // size hints right, wrong or none
		out, err := io.ReadAll(s)
		first := -1
		for _, b := range list {
			if i := bytes.Index(data, []byte(b.placeholder)); i >= 0 && (first < 0 || i+len(b.placeholder) < first) {
				first = i + len(b.placeholder)
			}
		}
		if first < 0 {
			if err != nil || !bytes.Equal(out, data) {
				t.Fatalf("clean data changed or refused: %v", err)
			}
			return
		}
		if !errors.Is(err, errBlocked) || !s.blocked() {
			t.Fatalf("placeholder not found: err %v", err)
		}
		if len(out) >= first || findAny(out, list) != nil {
			t.Fatalf("released %d bytes, the first placeholder ends at %d", len(out), first)
		}
	})
}

// TestScanReaderReadErrors: the underlying reader's error is returned as it is.
func TestScanReaderReadErrors(t *testing.T) {
	boom := errors.New("boom")
	s := newScanReader(io.NopCloser(iotest.ErrReader(boom)), []binding{{placeholder: "PLACEHOLDER-ONE-0001"}}, 20, -1)
	if _, err := io.ReadAll(s); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
}

// TestDecodeBody: the codings it inspects, and the refusals.
func TestDecodeBody(t *testing.T) {
	if _, err := decodeBody("br", []byte("x"), 10); !errors.Is(err, errUndecodable) {
		t.Fatalf("br: %v", err)
	}
	if _, err := decodeBody("gzip, zstd", []byte("x"), 10); !errors.Is(err, errUndecodable) {
		t.Fatalf("list of codings: %v", err)
	}
	if _, err := decodeBody("gzip", []byte("not gzip"), 10); !errors.Is(err, errUndecodable) {
		t.Fatalf("bad gzip: %v", err)
	}
	big := gzipped(bytes.Repeat([]byte("a"), 1000))
	if _, err := decodeBody("gzip", big, 999); !errors.Is(err, errUndecodable) {
		t.Fatalf("over the decoded limit: %v", err)
	}
	if out, err := decodeBody("gzip", big, 1000); err != nil || len(out) != 1000 {
		t.Fatalf("at the limit: %d bytes, %v", len(out), err)
	}
	plain := []byte("hello " + strings.Repeat("x", 100))
	var zb bytes.Buffer
	zw := zlib.NewWriter(&zb)
	zw.Write(plain)
	zw.Close()
	enc, _ := zstd.NewWriter(nil)
	for coding, data := range map[string][]byte{"deflate": zb.Bytes(), "zstd": enc.EncodeAll(plain, nil)} {
		if out, err := decodeBody(coding, data, 1000); err != nil || !bytes.Equal(out, plain) {
			t.Errorf("%s: %q, %v", coding, out, err)
		}
	}
}

// FuzzScrubReader: however the body is split into reads and whatever the size of the
// reader's buffer (under and over scrubMinRead, so that both the scratch buffer and the
// caller's are scanned), no real value survives, the rest is unchanged, and nothing is
// held back at the end.
func FuzzScrubReader(f *testing.F) {
	f.Add([]byte("hello world"), uint8(3), uint16(0), uint16(64))
	f.Add([]byte("xxREALVALUE-0001yyREALVAL"), uint8(1), uint16(2), uint16(9000))
	long := bytes.Repeat([]byte("data: zzzz\n\n"), 2000)
	f.Add(long, uint8(63), uint16(4092), uint16(8191))
	f.Add(long, uint8(40), uint16(9), uint16(5000))
	list := []binding{{value: "REALVALUE-0001", placeholder: "PLACEHOLDR-0001"}, {value: "RRRRRR-second", placeholder: "ph-second-longer"}}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8, insert, bufSize uint16) {
		if len(data) > 0 && insert%3 == 0 {
			at := int(insert) % len(data)
			data = append(append(append([]byte{}, data[:at]...), list[int(insert)%2].value...), data[at:]...)
		}
		n := int(chunk%64) + 1
		if len(data) > 1000 {
			n = n * 512 // reads of up to 32 KiB
		}
		out, err := readAllWith(newScrubReader(&chunked{data: data, n: n}, list), int(bufSize)%(20<<10)+1)
		if err != nil {
			t.Fatal(err)
		}
		want := data
		for _, b := range list {
			want = bytes.ReplaceAll(want, []byte(b.value), []byte(b.placeholder))
		}
		for _, b := range list {
			if bytes.Contains(want, []byte(b.value)) {
				return // a replacement made a new occurrence; the reader may differ
			}
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("out %q, want %q", out, want)
		}
	})
}

// readAllWith reads r to its end through a buffer of size bytes.
func readAllWith(r io.Reader, size int) ([]byte, error) {
	var out []byte
	buf := make([]byte, size)
	for {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// TestScrubHoldsOnlyPartials: a chunk ending in a blank line is released whole; one
// ending in the start of a real value holds that start back.
func TestScrubHoldsOnlyPartials(t *testing.T) {
	list := []binding{{value: "REALVALUE-0001", placeholder: "PLACEHOLDR-0001"}}
	s := newScrubReader(&chunked{data: []byte("data: x\n\nREAL"), n: 9}, list)
	buf := make([]byte, 64)
	if n, _ := s.Read(buf); string(buf[:n]) != "data: x\n\n" {
		t.Fatalf("first read %q", buf[:n])
	}
	if partialTail([]byte("abcREAL"), list) != 4 || partialTail([]byte("data\n\n"), list) != 0 {
		t.Fatal("partialTail is wrong")
	}
}
