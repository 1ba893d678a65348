package gitreview

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/format/objfile"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/utils/ioutil"
	"golang.org/x/sys/unix"
)

// objects reads objects for a review: W's own objects from W's store (trusted: the
// developer's), every other object from S's store, verified, capped and kept in memory
// (verified) until the apply writes it. It implements storer.EncodedObjectStorer over
// W's store so go-git's commit and tree functions read through it.
type objects struct {
	*filesystem.Storage // W's store: everything not overridden
	s                   *filesystem.Storage
	sDir, wDir          string // S's and W's git directories
	verified            map[plumbing.Hash]*plumbing.MemoryObject
	bytes               int64
	inWMemo             map[plumbing.Hash]bool // inW answers
	packs, wPacks       []sPack                // S's and W's packs, loaded on first use
	packsLoaded         bool
}

var _ storer.EncodedObjectStorer = (*objects)(nil)

// sPack is one pack with its index, and the pack open while a review reads it.
type sPack struct {
	pack string
	idx  *idxfile.MemoryIndex
	f    *os.File
	sc   *packfile.Scanner
}

// maxOpenPacks is how many pack files a store keeps open between reads (go-git closes
// the least recently used beyond it; Review.Close closes the rest).
const maxOpenPacks = 32

// openStore opens the object store of the git directory dir; hostile (S's) is bound to
// dir, so no symlink leads out of it (W's own repository is the developer's, and the
// bound checks cost a path walk per open).
func openStore(dir string, hostile bool) *filesystem.Storage {
	fs := osfs.New(dir)
	if hostile {
		fs = osfs.New(dir, osfs.WithBoundOS())
	}
	return filesystem.NewStorageWithOptions(fs, cache.NewObjectLRUDefault(),
		filesystem.Options{LargeObjectThreshold: MaxObjectSize, MaxOpenDescriptors: maxOpenPacks})
}

// inW reports whether W's store holds h (asked once per object and review).
func (o *objects) inW(h plumbing.Hash) bool {
	if in, ok := o.inWMemo[h]; ok {
		return in
	}
	in := o.wHas(h)
	o.inWMemo[h] = in
	return in
}

// wHas looks h up in W's pack indexes, then as a loose object, then (only when W borrows
// object stores through objects/info/alternates) through go-git.
func (o *objects) wHas(h plumbing.Hash) bool {
	if o.loadPacks() == nil {
		for _, p := range o.wPacks {
			if _, err := p.idx.FindOffset(h); err == nil {
				return true
			}
		}
	}
	hex := h.String()
	if _, err := os.Lstat(filepath.Join(o.wDir, "objects", hex[:2], hex[2:])); err == nil {
		return true
	}
	if _, err := os.Lstat(filepath.Join(o.wDir, "objects", "info", "alternates")); err != nil {
		return false
	}
	return o.Storage.HasEncodedObject(h) == nil
}

// close closes the packs a review opened.
func (o *objects) close() {
	for _, p := range o.packs {
		if p.f != nil {
			p.f.Close()
		}
	}
}

// EncodedObject returns W's object h, or S's verified one (reading and verifying it on
// first use). A type other than plumbing.AnyObject must match.
func (o *objects) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if obj, ok := o.verified[h]; ok {
		if t != plumbing.AnyObject && obj.Type() != t {
			return nil, plumbing.ErrObjectNotFound
		}
		return obj, nil
	}
	if o.inW(h) {
		return o.Storage.EncodedObject(t, h)
	}
	obj, err := o.verify(h)
	if err != nil {
		return nil, err
	}
	if t != plumbing.AnyObject && obj.Type() != t {
		return nil, fmt.Errorf("object %s: a %s, not a %s", h, obj.Type(), t)
	}
	return obj, nil
}

// HasEncodedObject reports whether h is in W or (verified or not yet read) in S.
func (o *objects) HasEncodedObject(h plumbing.Hash) error {
	if _, ok := o.verified[h]; ok || o.inW(h) {
		return nil
	}
	return o.s.HasEncodedObject(h)
}

// verify reads S's object h within the caps, checks that the SHA-1 of its typed content
// is h and keeps it. A missing object is plumbing.ErrObjectNotFound (wrapped).
func (o *objects) verify(h plumbing.Hash) (*plumbing.MemoryObject, error) {
	if len(o.verified) >= MaxNewObjects {
		return nil, fmt.Errorf("object %s: more than %d new objects (MaxNewObjects)", h, MaxNewObjects)
	}
	if err := o.checkChain(h); err != nil {
		return nil, err
	}
	size, err := o.s.EncodedObjectSize(h)
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", h, err)
	}
	if size < 0 || size > MaxObjectSize {
		return nil, fmt.Errorf("object %s: %d bytes, over the %d byte cap (MaxObjectSize)", h, size, MaxObjectSize)
	}
	if o.bytes+size > MaxNewBytes {
		return nil, fmt.Errorf("object %s: new objects over %d bytes (MaxNewBytes)", h, MaxNewBytes)
	}
	typ, r, err := o.openS(h)
	if err != nil {
		return nil, fmt.Errorf("read object %s: %w", h, err)
	}
	defer r.Close()
	content, err := io.ReadAll(io.LimitReader(r, size+1))
	if err != nil {
		return nil, fmt.Errorf("read object %s: %w", h, err)
	}
	if int64(len(content)) != size {
		return nil, fmt.Errorf("object %s: more or fewer bytes of content than its header's %d", h, size)
	}
	if got := plumbing.ComputeHash(typ, content); got != h {
		return nil, fmt.Errorf("object %s: content hashes to %s: corrupt or forged", h, got)
	}
	obj := &plumbing.MemoryObject{}
	obj.SetType(typ)
	obj.Write(content)
	o.verified[h] = obj
	o.bytes += size
	return obj, nil
}

// openS opens S's object h for reading its content: a loose object with brood's own
// reader (go-git would inflate a loose object past the size its header declares), a
// packed one with go-git (which bounds every entry by its declared size).
func (o *objects) openS(h plumbing.Hash) (plumbing.ObjectType, io.ReadCloser, error) {
	hex := h.String()
	f, err := os.OpenFile(filepath.Join(o.sDir, "objects", hex[:2], hex[2:]), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err == nil {
		zr, err := objfile.NewReader(f)
		if err != nil {
			f.Close()
			return 0, nil, err
		}
		t, _, err := zr.Header()
		if err != nil {
			zr.Close()
			f.Close()
			return 0, nil, err
		}
		return t, ioutil.NewReadCloserWithCloser(zr, f.Close), nil
	}
	raw, err := o.s.EncodedObject(plumbing.AnyObject, h)
	if err != nil {
		return 0, nil, err
	}
	r, err := raw.Reader()
	return raw.Type(), r, err
}

// loadPacks reads the indexes of S's and W's packs once.
func (o *objects) loadPacks() error {
	if o.packsLoaded {
		return nil
	}
	o.packsLoaded = true
	var err error
	if o.packs, err = loadIndexes(o.sDir); err != nil {
		return err
	}
	o.wPacks, err = loadIndexes(o.wDir)
	return err
}

// checkIndexes runs idxSizeOK on every pack index of the git directory dir.
func checkIndexes(dir string) error {
	idxs, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "pack-*.idx"))
	if err != nil {
		return err
	}
	for _, ip := range idxs {
		f, err := os.Open(ip)
		if err != nil {
			return fmt.Errorf("open pack index %s: %w", ip, err)
		}
		err = idxSizeOK(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("pack index %s: %w", filepath.Base(ip), err)
		}
	}
	return nil
}

// loadIndexes reads the pack indexes of the git directory dir (idxfile, gitformat-pack(5)).
func loadIndexes(dir string) ([]sPack, error) {
	idxs, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "pack-*.idx"))
	if err != nil {
		return nil, err
	}
	var packs []sPack
	for _, ip := range idxs {
		f, err := os.Open(ip)
		if err != nil {
			return nil, fmt.Errorf("open pack index %s: %w", ip, err)
		}
		if err := idxSizeOK(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("pack index %s: %w", filepath.Base(ip), err)
		}
		idx := idxfile.NewMemoryIndex()
		err = idxfile.NewDecoder(f).Decode(idx)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read pack index %s: %w", ip, err)
		}
		packs = append(packs, sPack{pack: ip[:len(ip)-len(".idx")] + ".pack", idx: idx})
	}
	return packs, nil
}

// idxSizeOK refuses a version-2 pack index whose object count (the last fan-out entry)
// needs more bytes than the file has (at least 28 per object: name, CRC and offset;
// gitformat-pack(5)), before go-git's decoder allocates tables of that count.
func idxSizeOK(f *os.File) error {
	var head [8 + 256*4]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return fmt.Errorf("read header: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	n := int64(binary.BigEndian.Uint32(head[8+255*4:]))
	if want := int64(len(head)) + 28*n + 40; fi.Size() < want {
		return fmt.Errorf("claims %d objects but has only %d bytes", n, fi.Size())
	}
	return nil
}

// checkChain follows the delta chain of h in the S pack that holds it (nothing for a
// loose object): every entry's size within MaxObjectSize and at most MaxDeltaDepth
// deltas, checked from the entry headers alone before anything is inflated.
func (o *objects) checkChain(h plumbing.Hash) error {
	if err := o.loadPacks(); err != nil {
		return err
	}
	for i := range o.packs {
		p := &o.packs[i]
		off, err := p.idx.FindOffset(h)
		if err != nil {
			continue
		}
		if err := p.chainWithinCaps(off); err != nil {
			return fmt.Errorf("object %s in %s: %w", h, filepath.Base(p.pack), err)
		}
		return nil
	}
	return nil
}

// chainWithinCaps walks the delta chain starting at offset off of pack p (opened on
// first use, closed by Review.Close).
func (p *sPack) chainWithinCaps(off int64) error {
	if p.f == nil {
		f, err := os.Open(p.pack)
		if err != nil {
			return err
		}
		p.f, p.sc = f, packfile.NewScanner(f)
	}
	sc := p.sc
	for depth := 0; ; depth++ {
		if depth > MaxDeltaDepth {
			return fmt.Errorf("delta chain longer than %d (MaxDeltaDepth)", MaxDeltaDepth)
		}
		hd, err := sc.SeekObjectHeader(off)
		if err != nil {
			return fmt.Errorf("read entry at %d: %w", off, err)
		}
		if hd.Length < 0 || hd.Length > MaxObjectSize {
			return fmt.Errorf("entry at %d: %d bytes, over the %d byte cap (MaxObjectSize)", off, hd.Length, MaxObjectSize)
		}
		switch hd.Type {
		case plumbing.OFSDeltaObject:
			off = hd.OffsetReference
		case plumbing.REFDeltaObject:
			if off, err = p.idx.FindOffset(hd.Reference); err != nil {
				return errors.New("delta base " + hd.Reference.String() + " is not in the same pack")
			}
		default:
			return nil
		}
	}
}
