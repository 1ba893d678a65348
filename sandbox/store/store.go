// Package store is the one layout of brood's artifact store: the root-owned directory
// (by default /var/lib/brood, the helper's state_dir) that holds the guest kernels, the
// base initramfs files and the rootfs images a VM boots from, the names of its entries,
// and (on Linux) the trusted opener and lister the helper reads it with. The builders
// (packages kernel, initramfs, image and assets) write through the same Layout, so a
// changed root moves writers and readers together.
//
//	<root>/kernels/<release>/vmlinux                             the PVH kernel
//	<root>/kernels/<release>/ready                               marks a complete kernel entry (written last)
//	<root>/kernels/<release>/root/lib/modules/<release>/         the unpacked modules (builder input)
//	<root>/kernels/<release>/initramfs/initramfs-<hex32>.cpio.gz a base initramfs
//	<root>/images/<name>-<hex32>.erofs                           a rootfs image
//	<root>/logs/build-<name>.log                                 the log of the latest build of <name>
//
// <hex32> is the first 32 hex digits of a SHA-256 content digest (of the initramfs files,
// of the image's tree); entries whose name starts with "." are work in progress.
//
// Privilege: none to compute paths and names, which brood uses to validate an image
// name; the helper reads the store as root, and only root writes it (the builders).
package store

import (
	"path/filepath"
	"regexp"
)

// DefaultRoot is the store's root when the helper configuration does not set state_dir.
const DefaultRoot = "/var/lib/brood"

// Entry names below the root and below a kernel release.
const (
	KernelsDir   = "kernels"
	ImagesDir    = "images"
	LogsDir      = "logs"
	InitramfsDir = "initramfs"
	VmlinuxName  = "vmlinux"
	ReadyName    = "ready"
	// ImageExt is the file name extension of images (EROFS, see package image).
	ImageExt = ".erofs"
	// DigestLen is how many hex digits of a content digest a file name carries.
	DigestLen = 32
)

// Layout is the store rooted at Root (a clean absolute path). The zero value is not
// usable: use New.
type Layout struct {
	Root string
}

// New returns the layout rooted at root; empty means DefaultRoot.
func New(root string) Layout {
	if root == "" {
		root = DefaultRoot
	}
	return Layout{Root: root}
}

// Kernels is the directory of kernel releases.
func (l Layout) Kernels() string { return filepath.Join(l.Root, KernelsDir) }

// Kernel is the directory of one kernel release.
func (l Layout) Kernel(release string) string { return filepath.Join(l.Kernels(), release) }

// Initramfs is the directory of the base initramfs files built for release.
func (l Layout) Initramfs(release string) string {
	return filepath.Join(l.Kernel(release), InitramfsDir)
}

// Images is the directory of rootfs images.
func (l Layout) Images() string { return filepath.Join(l.Root, ImagesDir) }

// Logs is the directory of build logs (root's, mode 0755; the logs are 0644, readable by
// every user: they hold only what mmdebstrap, apt and mkfs.erofs print). Nothing boots
// from it.
func (l Layout) Logs() string { return filepath.Join(l.Root, LogsDir) }

// BuildLog is the log of the latest build of image name (a ValidImageName name).
func (l Layout) BuildLog(name string) string {
	return filepath.Join(l.Logs(), "build-"+name+".log")
}

var (
	imageNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	releaseRe   = regexp.MustCompile(`^[0-9][0-9A-Za-z.+_-]{0,63}$`)
	initramfsRe = regexp.MustCompile(`^initramfs-[0-9a-f]{32}\.cpio\.gz$`)
	imageFileRe = regexp.MustCompile(`^([a-z0-9][a-z0-9._-]{0,62})-([0-9a-f]{32})` + regexp.QuoteMeta(ImageExt) + `$`)
	hexRe       = regexp.MustCompile(`^[0-9a-f]+$`)
)

// ValidImageName reports whether name can name an image ("test", "codex"): 1-63 of
// [a-z0-9._-], starting with a letter or digit. It is a name, never a path.
func ValidImageName(name string) bool { return imageNameRe.MatchString(name) }

// ValidRelease reports whether rel has the form of a kernel release ("6.1.0-57-amd64").
func ValidRelease(rel string) bool { return releaseRe.MatchString(rel) }

// ValidInitramfsFile reports whether name has the form InitramfsFile gives.
func ValidInitramfsFile(name string) bool { return initramfsRe.MatchString(name) }

// InitramfsFile is the file name of the base initramfs with content digest digest (hex,
// at least DigestLen digits): "initramfs-<hex32>.cpio.gz".
func InitramfsFile(digest string) string {
	return "initramfs-" + shortDigest(digest) + ".cpio.gz"
}

// ImageFile is the file name of image name with tree digest digest (hex, at least
// DigestLen digits): "<name>-<hex32>.erofs".
func ImageFile(name, digest string) string { return name + "-" + shortDigest(digest) + ImageExt }

// ParseImageFile returns the image name and short digest of an image file name, or
// ok false when file is not one (a work file, another extension, a bad name).
func ParseImageFile(file string) (name, digest string, ok bool) {
	m := imageFileRe.FindStringSubmatch(file)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// shortDigest is the first DigestLen digits of a hex digest. A digest that is shorter or
// not lower-case hex is a programming error of the builder and panics.
func shortDigest(d string) string {
	if len(d) < DigestLen || !hexRe.MatchString(d) {
		panic("store: content digest " + d + " is not hex of at least 32 digits")
	}
	return d[:DigestLen]
}
