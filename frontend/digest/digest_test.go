package digest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// reference is the definition in the package comment, written out literally: the whole
// outer input is built in memory and hashed once.
func reference(content []byte) []byte {
	in := []byte(Prefix)
	for off := 0; off < len(content); off += BlockSize {
		b := content[off:min(off+BlockSize, len(content))]
		if bytes.Count(b, []byte{0}) == len(b) {
			in = append(in, 0x00)
			continue
		}
		sum := sha256.Sum256(b)
		in = append(append(in, 0x01), sum[:]...)
	}
	in = binary.BigEndian.AppendUint64(in, uint64(len(content)))
	sum := sha256.Sum256(in)
	return sum[:]
}

// piece is one part of a test file: n bytes of data (a repeated non-zero pattern, with
// a NUL at its start when nul), n explicit zero bytes (zero), or an n-byte hole.
type piece struct {
	kind byte // 'd' data, 'z' explicit zeros, 'h' hole
	n    int64
}

// build writes the layout into a new file under dir and returns its path and content.
func build(t testing.TB, dir string, layout []piece) (string, []byte) {
	t.Helper()
	f, err := os.CreateTemp(dir, "layout")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var content []byte
	var off int64
	for i, p := range layout {
		b := make([]byte, p.n)
		if p.kind == 'd' {
			for j := range b {
				b[j] = byte('a' + (int64(i)+int64(j))%23)
			}
		}
		if p.kind != 'h' {
			if _, err := f.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
		}
		content = append(content, b...)
		off += p.n
	}
	if err := f.Truncate(off); err != nil {
		t.Fatal(err)
	}
	return f.Name(), content
}

func fileResult(t testing.TB, p string) Result {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := File(f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func readerResult(t testing.TB, p string) Result {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := Reader(f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkLayout asserts File (fast path) == Reader (streaming) == the reference, with the
// right size and binary flag.
func checkLayout(t testing.TB, dir string, layout []piece) {
	t.Helper()
	p, content := build(t, dir, layout)
	defer os.Remove(p)
	want := Result{Sum: reference(content), Size: int64(len(content)), Binary: bytes.IndexByte(content, 0) >= 0}
	fast, slow := fileResult(t, p), readerResult(t, p)
	for name, got := range map[string]Result{"File": fast, "Reader": slow} {
		if !bytes.Equal(got.Sum, want.Sum) || got.Size != want.Size || got.Binary != want.Binary {
			t.Fatalf("%s(%v) = %x size %d binary %v, want %x size %d binary %v", name, layout,
				got.Sum, got.Size, got.Binary, want.Sum, want.Size, want.Binary)
		}
	}
	h := New()
	h.Write(content)
	if got := h.Result(); !bytes.Equal(got.Sum, want.Sum) {
		t.Fatalf("Hasher.Write(%v) = %x, want %x", layout, got.Sum, want.Sum)
	}
}

const K, B = 1 << 10, BlockSize

func TestFileEqualsStreamingLayouts(t *testing.T) {
	dir := t.TempDir()
	for name, layout := range map[string][]piece{
		"size 0":                       nil,
		"one byte":                     {{'d', 1}},
		"one block":                    {{'d', B}},
		"block and one":                {{'d', B + 1}},
		"not a multiple":               {{'d', 3*B + 1234}},
		"all hole, one block":          {{'h', B}},
		"all hole, short":              {{'h', 100}},
		"all hole, 5 blocks and a bit": {{'h', 5*B + 7}},
		"explicit zeros":               {{'z', 3 * B}},
		"explicit zeros short tail":    {{'d', B}, {'z', 10}},
		"hole aligned":                 {{'d', B}, {'h', 4 * B}, {'d', B}},
		"hole not aligned":             {{'d', 5 * K}, {'h', 200 * K}, {'d', 3 * K}},
		"hole inside one block":        {{'d', 4 * K}, {'h', 8 * K}, {'d', 4 * K}},
		"hole at start":                {{'h', 300 * K}, {'d', 1}},
		"hole at end":                  {{'d', 70 * K}, {'h', 1000 * K}},
		"hole at end unaligned":        {{'d', 1}, {'h', 3*B + 5}},
		"data across block border":     {{'h', B - 4*K}, {'d', 8 * K}, {'h', 2 * B}},
		"zeros then hole then zeros":   {{'z', 12 * K}, {'h', 2 * B}, {'z', B}},
		"many extents":                 {{'d', 4 * K}, {'h', 4 * K}, {'d', 4 * K}, {'h', 100 * K}, {'z', 4 * K}, {'d', 60 * K}, {'h', 4 * K}},
		"NUL in data only":             {{'d', 10}, {'z', 1}, {'d', 10}},
		// Long data runs, with zero blocks inside and holes between.
		"20 blocks and a bit":     {{'d', 20*B + 5}},
		"zeros inside a long run": {{'d', 2 * B}, {'z', 3 * B}, {'d', 2*B + 1}, {'z', 17 * B}, {'d', 9 * B}},
		"long runs between holes": {{'h', 3*B + 100}, {'d', 33 * B}, {'h', 40 * B}, {'d', 5*B - 3}},
	} {
		t.Run(name, func(t *testing.T) { checkLayout(t, dir, layout) })
	}
}

// TestHoleAndZerosSameDigest: the digest depends on the bytes, not on how they are stored.
func TestHoleAndZerosSameDigest(t *testing.T) {
	dir := t.TempDir()
	sparse, _ := build(t, dir, []piece{{'d', 5 * K}, {'h', 300 * K}, {'d', 7 * K}})
	dense, _ := build(t, dir, []piece{{'d', 5 * K}, {'z', 300 * K}, {'d', 7 * K}})
	// Same data pattern: build derives it from the piece index, equal here.
	a, b := fileResult(t, sparse), fileResult(t, dense)
	if !bytes.Equal(a.Sum, b.Sum) || !a.Binary || !b.Binary {
		t.Fatalf("sparse %x binary %v, dense %x binary %v: want equal, binary", a.Sum, a.Binary, b.Sum, b.Binary)
	}
	var st unix.Stat_t
	if err := unix.Stat(sparse, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 >= st.Size {
		t.Fatalf("test file %s is not sparse (%d blocks for %d bytes): the test proves nothing", sparse, st.Blocks, st.Size)
	}
}

// TestKnownDigests pins the definition: a change to it must change this test (and the
// manifest and journal format versions). The expected values were computed apart from
// this package, with Python's hashlib on the byte strings the definition spells out.
func TestKnownDigests(t *testing.T) {
	for _, c := range []struct {
		content []byte
		want    string
	}{
		{nil, "be84c06c4a070b6c607dd5d89ff9f34174df6a0776dc078ea77b5856a63d87be"},
		{[]byte("hello\n"), "92068cf975cc42da4b8df0cb3df1d0a822aae496cc47fe4e9f7ce2de29c3b240"},
		{append(make([]byte, BlockSize), 'a'), "357bff62db5c1f662b7f7960f3861a2dd1671504e08188e334f92172182ee3b8"},
	} {
		got := Bytes(c.content)
		if !bytes.Equal(got, reference(c.content)) {
			t.Fatalf("Bytes(%q) = %x, reference %x", c.content, got, reference(c.content))
		}
		if hex.EncodeToString(got) != c.want {
			t.Errorf("Bytes(%q) = %x, want %s", c.content, got, c.want)
		}
	}
	// Not the plain SHA-256: the digest must never be mistaken for one.
	if plain := sha256.Sum256([]byte("hello\n")); bytes.Equal(Bytes([]byte("hello\n")), plain[:]) {
		t.Fatal("digest equals plain SHA-256")
	}
	// A short all-zero last block differs from a full one (the size suffix).
	if bytes.Equal(Bytes(make([]byte, 10)), Bytes(make([]byte, 11))) {
		t.Fatal("10 and 11 zero bytes have one digest")
	}
}

// TestWriteZerosEqualsWrite: any split of zeros between Write and WriteZeros, at any
// alignment, gives the digest of the bytes.
func TestWriteZerosEqualsWrite(t *testing.T) {
	for _, c := range [][3]int64{{0, 0, 0}, {1, B, 1}, {B - 1, 2*B + 3, 5}, {B, B, B}, {7, 0, 7}, {0, 10*B + 1, 0}, {9 * B, 2 * B, 6*B + 1}, {B + 1, 0, 20 * B}} {
		content := append(append(bytes.Repeat([]byte{'x'}, int(c[0])), make([]byte, c[1])...), bytes.Repeat([]byte{'y'}, int(c[2]))...)
		h := New()
		h.Write(content[:c[0]])
		h.WriteZeros(c[1])
		h.Write(content[c[0]+c[1]:])
		got := h.Result()
		if !bytes.Equal(got.Sum, reference(content)) || got.Size != int64(len(content)) || got.Binary != (c[1] > 0) {
			t.Errorf("%v: got %x size %d binary %v, want %x size %d", c, got.Sum, got.Size, got.Binary, reference(content), len(content))
		}
	}
}

// readChars returns this process's rchar from /proc/self/io: bytes passed by read(2) and
// pread(2) (proc(5)).
func readChars(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no rchar in /proc/self/io")
	return 0
}

// TestFileSkipsHoles: a 64 GiB file with 1 MiB of data is digested by reading about its
// data, not its size (the reads are counted, not timed).
func TestFileSkipsHoles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sparse")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("data"), 256<<10/4)
	for _, off := range []int64{0, 5 << 30, 33<<30 + 12345, 64<<30 - 256<<10} {
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	before := readChars(t)
	got := fileResult(t, p)
	read := readChars(t) - before
	if got.Size != 64<<30 || !got.Binary {
		t.Fatalf("size %d binary %v, want %d, true", got.Size, got.Binary, int64(64<<30))
	}
	if read > 4<<20 {
		t.Fatalf("File read %d bytes of a file with 1 MiB of data", read)
	}
}

// FuzzFileEqualsStreaming builds a file from a random layout (each pair of input bytes is
// a piece: kind from the first, length from the second, scaled so that holes and data
// straddle 4 KiB pages and 64 KiB blocks) and requires File == Reader == the reference.
func FuzzFileEqualsStreaming(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 1, 1, 200, 0, 3})
	f.Add([]byte{2, 255, 2, 255, 1, 16, 0, 1})
	f.Add([]byte{1, 64, 2, 17, 0, 250, 1, 1})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, in []byte) {
		var layout []piece
		var total int64
		for i := 0; i+1 < len(in) && len(layout) < 16; i += 2 {
			// Lengths in 1 KiB steps plus an odd tail: 0..~255 KiB.
			n := int64(in[i+1])*K + int64(in[i]>>2)
			kind := "dhz"[in[i]%3]
			if total+n > 8<<20 {
				break
			}
			layout = append(layout, piece{kind, n})
			total += n
		}
		checkLayout(t, dir, layout)
	})
}
