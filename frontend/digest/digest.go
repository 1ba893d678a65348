// Package digest computes brood's content digest: the value that identifies a regular
// file's bytes in the manifest, the diff, the review and the flush journal. It depends on
// the content only (a sparse file and a file with the same bytes written out as explicit
// zeros have one digest), and taking it from a file costs time proportional to the file's
// data, not its apparent size: blocks that lie entirely inside a hole are never read.
//
// Definition (format "brood-content-v1"). The content, of size N bytes, is split into
// blocks of BlockSize (65536) bytes; the last block holds the N mod 65536 remaining bytes
// when N is not a multiple (there are ceil(N/65536) blocks, none for N = 0). The digest is
//
//	SHA-256( "brood-content-v1\x00"                  17 bytes, domain separation
//	         || E(block 0) || E(block 1) || ...      one entry per block, in order
//	         || N                                    8 bytes, unsigned big-endian )
//
// where E(b) is the single byte 0x00 when every byte of b is zero, and otherwise the byte
// 0x01 followed by the 32-byte SHA-256 of b (of its actual length: a short last block is
// hashed as it is, never padded). The size comes last so that a stream can be digested
// without knowing its length first; it also tells an all-zero short last block from a full
// one. The encoding is injective: entries are self-delimiting (1 or 33 bytes) and the size
// is the fixed-length suffix. The digest is 32 bytes (Size).
//
// SHA-256 is FIPS 180-4 (crypto/sha256). Holes are found with lseek(2) SEEK_DATA and
// SEEK_HOLE; a hole reads as zeros (read(2)), so skipping it gives the digest reading it
// would.
//
// Privilege: none; pure computation over file descriptors the caller opened, linked into
// brood (snapshot, diff, review, flush).
package digest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

const (
	// BlockSize is the block the content is split into (bytes).
	BlockSize = 64 << 10
	// Size is the length of a digest (bytes): one SHA-256.
	Size = sha256.Size
	// Prefix starts the outer hash input: the format name and a NUL (17 bytes).
	Prefix = "brood-content-v1\x00"

	entryZero = 0x00 // E(b) for an all-zero block
	entryData = 0x01 // E(b) = 0x01 || SHA-256(b) otherwise
)

// zeroBlock is what a block inside a hole reads as; compared against, never written.
var zeroBlock [BlockSize]byte

// zeroEntries is a run of entryZero bytes, written to the outer hash in one call per run
// of up to len(zeroEntries) skipped blocks.
var zeroEntries [4096]byte

// Result is what one pass over some content learns.
type Result struct {
	Sum    []byte // the digest, Size bytes
	Size   int64  // content bytes (N)
	Binary bool   // a NUL byte occurs anywhere in the content (a hole counts: it reads as NULs)
}

// Hasher computes the digest of the bytes written to it, in order. The zero value is not
// usable; New returns one. A Hasher buffers at most one incomplete block (BlockSize
// bytes) whatever the content size, allocated as needed (small content costs little).
type Hasher struct {
	outer  hash.Hash
	block  []byte // the current, incomplete block: len is its bytes so far
	size   int64
	binary bool
}

// New returns a Hasher for empty content.
func New() *Hasher {
	h := &Hasher{outer: sha256.New()}
	h.outer.Write([]byte(Prefix))
	return h
}

// Reset returns h to empty content, keeping its buffer.
func (h *Hasher) Reset() {
	h.outer.Reset()
	h.outer.Write([]byte(Prefix))
	h.block, h.size, h.binary = h.block[:0], 0, false
}

// Write adds p to the content. It never fails (io.Writer).
func (h *Hasher) Write(p []byte) (int, error) {
	n := len(p)
	h.size += int64(n)
	if !h.binary && bytes.IndexByte(p, 0) >= 0 {
		h.binary = true
	}
	if len(h.block) > 0 {
		k := min(len(p), BlockSize-len(h.block))
		h.block, p = append(h.block, p[:k]...), p[k:]
		if len(h.block) < BlockSize {
			return n, nil
		}
		h.entry(h.block)
		h.block = h.block[:0]
	}
	for len(p) >= BlockSize {
		h.entry(p[:BlockSize])
		p = p[BlockSize:]
	}
	h.block = append(h.block, p...)
	return n, nil
}

// WriteZeros adds n zero bytes to the content (n >= 0) without touching them: whole
// blocks cost one byte of outer hash each.
func (h *Hasher) WriteZeros(n int64) {
	if n <= 0 {
		return
	}
	h.binary = true
	if len(h.block) > 0 {
		k := min(n, int64(BlockSize-len(h.block)))
		h.block = append(h.block, zeroBlock[:k]...)
		h.size, n = h.size+k, n-k
		if len(h.block) < BlockSize {
			return
		}
		h.entry(h.block)
		h.block = h.block[:0]
	}
	for whole := n / BlockSize; whole > 0; {
		k := min(whole, int64(len(zeroEntries)))
		h.outer.Write(zeroEntries[:k])
		whole -= k
	}
	h.block = append(h.block, zeroBlock[:n%BlockSize]...)
	h.size += n
}

// entry adds E(b) for one block b (BlockSize bytes, or fewer for the last block).
func (h *Hasher) entry(b []byte) {
	if bytes.Equal(b, zeroBlock[:len(b)]) {
		h.outer.Write([]byte{entryZero})
		return
	}
	sum := sha256.Sum256(b)
	var e [1 + Size]byte
	e[0] = entryData
	copy(e[1:], sum[:])
	h.outer.Write(e[:])
}

// Result ends the content and returns its digest, size and binary flag. h must be Reset
// before it is written again.
func (h *Hasher) Result() Result {
	if len(h.block) > 0 {
		h.entry(h.block)
		h.block = h.block[:0]
	}
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(h.size))
	h.outer.Write(n[:])
	return Result{Sum: h.outer.Sum(nil), Size: h.size, Binary: h.binary}
}

// Bytes returns the digest of b.
func Bytes(b []byte) []byte {
	h := New()
	h.Write(b)
	return h.Result().Sum
}

// Empty is the digest of empty content.
var Empty = Bytes(nil)

// Reader reads r to EOF and returns the digest of what it read: the streaming path, for
// content that cannot seek. Memory is one BlockSize buffer. A read error is returned
// wrapped as "read: ...".
func Reader(r io.Reader) (Result, error) {
	h := New()
	buf := make([]byte, BlockSize)
	for {
		n, err := io.ReadFull(r, buf)
		h.Write(buf[:n])
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return h.Result(), nil
		}
		if err != nil {
			return Result{}, fmt.Errorf("read: %w", err)
		}
	}
}

// File returns the digest of the content of the open regular file f, reading it from
// offset 0 to end of file with pread(2) (f's offset is not used). Blocks lying entirely
// inside a hole (lseek(2) SEEK_DATA/SEEK_HOLE) are counted as zero blocks without being
// read; a filesystem that cannot tell (EINVAL, EOPNOTSUPP) is read in full. Bytes past the
// size fstat(2) gave (the file grew) are read as well, so the result is Reader's on the same
// bytes. A file written while it is read gives the digest of no particular content:
// callers compare its stat before and after. Errors are wrapped with the operation
// ("fstat", "lseek SEEK_DATA", "read").
func File(f *os.File) (Result, error) {
	fd := int(f.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Result{}, fmt.Errorf("fstat: %w", err)
	}
	h := New()
	buf := make([]byte, min(BlockSize, max(st.Size, 0)+1)) // a small file, a small buffer
	pos, err := sparse(h, fd, st.Size, buf)
	if err != nil {
		return Result{}, err
	}
	for { // to EOF, past st.Size when the file grew
		n, err := preadFull(fd, buf, pos)
		if err != nil {
			return Result{}, err
		}
		h.Write(buf[:n])
		pos += int64(n)
		if n < len(buf) {
			return h.Result(), nil
		}
	}
}

// sparse adds the first size bytes of fd to h, block by block: blocks inside a hole as
// zeros, unread; the others read through buf (min(BlockSize, size+1) bytes or more). It returns the offset
// reached: size, or less where the file ended early.
func sparse(h *Hasher, fd int, size int64, buf []byte) (int64, error) {
	var dataAt, holeAt int64 // the data extent [dataAt, holeAt) at or after pos; holeAt 0: unknown
	for pos := int64(0); pos < size; {
		if pos >= holeAt {
			var err error
			if dataAt, holeAt, err = nextData(fd, pos, size); err != nil {
				return pos, err
			}
		}
		if dataAt >= size { // only a hole remains
			h.WriteZeros(size - pos)
			return size, nil
		}
		// Blocks ending at or before dataAt are inside the hole: all of them at once.
		if zeroEnd := dataAt - dataAt%BlockSize; zeroEnd > pos {
			h.WriteZeros(zeroEnd - pos)
			pos = zeroEnd
			continue
		}
		end := min(pos+BlockSize, size)
		n, err := preadFull(fd, buf[:end-pos], pos)
		if err != nil {
			return pos, err
		}
		h.Write(buf[:n])
		if int64(n) < end-pos {
			return pos + int64(n), nil // shrank: File reads on from here and finds EOF
		}
		pos = end
	}
	return size, nil
}

// nextData returns the first data extent [data, hole) of fd at or after off, clipped to
// size; data = hole = size when only a hole remains. Where the filesystem cannot tell,
// everything from off is data.
func nextData(fd int, off, size int64) (data, hole int64, err error) {
	data, err = unix.Seek(fd, off, unix.SEEK_DATA)
	switch {
	case err == unix.ENXIO:
		return size, size, nil
	case err == unix.EINVAL || err == unix.EOPNOTSUPP:
		return off, size, nil
	case err != nil:
		return 0, 0, fmt.Errorf("lseek SEEK_DATA: %w", err)
	}
	if data >= size {
		return size, size, nil
	}
	if hole, err = unix.Seek(fd, data, unix.SEEK_HOLE); err != nil {
		return 0, 0, fmt.Errorf("lseek SEEK_HOLE: %w", err)
	}
	return data, min(hole, size), nil
}

// preadFull reads len(b) bytes at off unless the file ends first; it returns the count.
func preadFull(fd int, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		got, err := unix.Pread(fd, b[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("read: %w", err)
		}
		if got == 0 {
			break
		}
		n += got
	}
	return n, nil
}
