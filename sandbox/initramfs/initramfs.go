// Package initramfs builds the guest's initramfs in Go: a gzip-compressed newc cpio
// archive holding brood-guest as /init, the few kernel modules it loads (with their
// dependency closure from modules.dep), a trimmed modules.dep, their soft dependencies
// (modules.softdep, resolved to module names), modules.builtin and /dev/console. The base archive is the same for every session and cached by content
// digest; WithSession appends a small uncompressed archive with the session's
// configuration (the kernel unpacks concatenated archives in order).
//
// Privilege: none; it writes an archive from files it is given. The root helper uses it
// for each session's initramfs.
package initramfs

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/u-root/u-root/pkg/cpio"

	"brood.dev/brood/sandbox/guestcfg"
	"brood.dev/brood/sandbox/store"
)

// DefaultModules are the modules brood-guest needs (Debian's generic kernel builds them
// all as modules, none built in): virtio-mmio transport, virtio-serial (SSH channel), entropy,
// the rootfs disk (virtio_blk + erofs, see package image),
// the tmpfs overlay, the 9p workspace share and (only with a network) virtio_net.
// erofs needs libcrc32c, whose crc32c algorithm must already be registered: there is
// no modprobe in the guest to load crc32c_generic on demand.
var DefaultModules = []string{
	"virtio_mmio", "virtio_console", "virtio_rng", "virtio_blk",
	"crc32c_generic", "erofs", "overlay", "9pnet_virtio", "9p", "virtio_net",
}

// Options describe a base initramfs.
type Options struct {
	Release    string   // kernel release, e.g. "6.1.0-57-amd64"
	ModulesDir string   // the kernel's lib/modules/<Release> with modules.dep
	Guest      string   // static brood-guest binary (CGO_ENABLED=0)
	Modules    []string // module names to load at boot; nil means DefaultModules
}

// File is one file of an archive.
type File struct {
	Name string // path relative to the archive root, e.g. "etc/brood/session.json"
	Mode uint64 // permission bits
	Data []byte
}

// Files returns the base initramfs content for o (without directories, which Write adds).
func Files(o Options) ([]File, error) {
	mods := o.Modules
	if mods == nil {
		mods = DefaultModules
	}
	dep, err := os.ReadFile(filepath.Join(o.ModulesDir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("read modules.dep: %w", err)
	}
	builtin, err := os.ReadFile(filepath.Join(o.ModulesDir, "modules.builtin"))
	if err != nil {
		return nil, fmt.Errorf("read modules.builtin: %w", err)
	}
	db, err := ParseDepDB(dep, builtin)
	if err != nil {
		return nil, err
	}
	closure, err := db.Closure(mods)
	if err != nil {
		return nil, fmt.Errorf("module closure for %s: %w", o.Release, err)
	}
	// Optional in a kernel tree: without them no soft dependencies are known.
	softdep, _ := os.ReadFile(filepath.Join(o.ModulesDir, "modules.softdep"))
	alias, _ := os.ReadFile(filepath.Join(o.ModulesDir, "modules.alias"))
	guest, err := os.ReadFile(o.Guest)
	if err != nil {
		return nil, fmt.Errorf("read guest binary: %w", err)
	}
	modRoot := path.Join("lib/modules", o.Release)
	files := []File{
		{Name: guestcfg.InitPath, Mode: 0o755, Data: guest},
		{Name: guestcfg.ModulesLoadPath, Mode: 0o644, Data: []byte(strings.Join(mods, "\n") + "\n")},
		{Name: path.Join(modRoot, "modules.dep"), Mode: 0o644, Data: db.Subset(closure)},
		{Name: path.Join(modRoot, "modules.builtin"), Mode: 0o644, Data: builtin},
		{Name: path.Join(modRoot, "modules.softdep"), Mode: 0o644, Data: db.Softdeps(closure, softdep, alias)},
	}
	for _, m := range closure {
		b, err := os.ReadFile(filepath.Join(o.ModulesDir, m))
		if err != nil {
			return nil, fmt.Errorf("read module: %w", err)
		}
		files = append(files, File{Name: path.Join(modRoot, m), Mode: 0o644, Data: b})
	}
	return files, nil
}

// Digest is the content digest of files (names, modes and bytes), hex SHA-256.
func Digest(files []File) string {
	h := sha256.New()
	fmt.Fprintf(h, "brood-initramfs-v1\n")
	for _, f := range files {
		fmt.Fprintf(h, "%q %o %d\n", f.Name, f.Mode, len(f.Data))
		h.Write(f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Write writes files as one newc cpio archive (parent directories first, mode 0755,
// plus /dev/console, all owned by root, mtime 0) with its trailer.
func Write(w io.Writer, files []File, withConsole bool) error {
	rw := cpio.NewDedupWriter(cpio.Newc.Writer(w))
	var recs []cpio.Record
	dirs := map[string]bool{}
	addDirs := func(name string) {
		var parents []string
		for d := path.Dir(name); d != "." && d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			parents = append(parents, d)
		}
		for i := len(parents) - 1; i >= 0; i-- {
			recs = append(recs, cpio.Directory(parents[i], 0o755))
		}
	}
	if withConsole {
		addDirs("dev/console")
		recs = append(recs, cpio.CharDev("dev/console", 0o600, 5, 1))
	}
	sorted := append([]File(nil), files...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, f := range sorted {
		addDirs(f.Name)
		recs = append(recs, cpio.StaticRecord(f.Data, cpio.Info{Name: f.Name, Mode: cpio.S_IFREG | f.Mode}))
	}
	cpio.MakeAllReproducible(recs)
	if err := cpio.WriteRecords(rw, recs); err != nil {
		return fmt.Errorf("write cpio: %w", err)
	}
	if err := cpio.WriteTrailer(rw); err != nil {
		return fmt.Errorf("write cpio trailer: %w", err)
	}
	return nil
}

// Build returns the path of the base initramfs for o under cacheDir (a store.Layout's
// Initramfs(release)), named store.InitramfsFile(digest); it is written only when missing.
func Build(cacheDir string, o Options) (string, error) {
	files, err := Files(o)
	if err != nil {
		return "", fmt.Errorf("build initramfs: %w", err)
	}
	out := filepath.Join(cacheDir, store.InitramfsFile(Digest(files)))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("build initramfs: %w", err)
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed) // level is valid
	if err := Write(zw, files, true); err != nil {
		return "", fmt.Errorf("build initramfs: %w", err)
	}
	if err := zw.Close(); err != nil {
		return "", fmt.Errorf("build initramfs: gzip: %w", err)
	}
	if err := writeAtomic(out, buf.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("build initramfs: %w", err)
	}
	return out, nil
}

// WithSession writes to out the base initramfs followed by an uncompressed archive of
// files (the session's configuration). The base is padded with NULs to a 4-byte
// boundary, where the kernel looks for the next archive (init/initramfs.c). out is
// created mode 0600: it carries the session's SSH host private key.
func WithSession(base, out string, files []File) error {
	b, err := os.ReadFile(base)
	if err != nil {
		return fmt.Errorf("session initramfs: %w", err)
	}
	buf := bytes.NewBuffer(b)
	for buf.Len()%4 != 0 {
		buf.WriteByte(0)
	}
	if err := Write(buf, files, false); err != nil {
		return fmt.Errorf("session initramfs: %w", err)
	}
	if err := writeAtomic(out, buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("session initramfs: %w", err)
	}
	return nil
}

// SessionFiles returns the archive files carrying cfg.
func SessionFiles(cfg guestcfg.Config) ([]File, error) {
	b, err := cfg.Marshal()
	if err != nil {
		return nil, fmt.Errorf("marshal guest config: %w", err)
	}
	return []File{{Name: guestcfg.SessionPath, Mode: 0o600, Data: b}}, nil
}

// writeAtomic writes data to a temp file beside path and renames it into place.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
