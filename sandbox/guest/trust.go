package guest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"brood.dev/brood/sandbox/guestcfg"
)

// trustRoot is the directory the guestcfg paths of trust.go are resolved in ("/"; tests
// point it at a temporary tree).
var trustRoot = "/"

// maxBundle is the largest system CA bundle read, in bytes (Debian's is about 220 KiB).
const maxBundle = 4 << 20

// trustCA serves one guestcfg.TrustCARequest: it decodes and checks the payload and
// installs the certificate (installTrustCA).
func (g *guest) trustCA(payload []byte) error {
	var t guestcfg.TrustCA
	if err := ssh.Unmarshal(payload, &t); err != nil {
		return fmt.Errorf("trust CA request: %w", err)
	}
	return installTrustCA(trustRoot, t)
}

// installTrustCA writes t's certificate to guestcfg.SessionCAFile and appends it to
// guestcfg.SystemBundle (once: a bundle already holding it is left alone), both under
// root, mode 0644, making their directory (0755) when it is missing. Each file is written new beside its target (O_EXCL, O_NOFOLLOW) and
// renamed over it, inside an os.Root of root, so no symlink is followed.
func installTrustCA(root string, t guestcfg.TrustCA) error {
	if err := t.Check(); err != nil {
		return err
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("trust session CA: %w", err)
	}
	defer r.Close()
	// An image without a CA store (no ca-certificates package) gets the directory, and a
	// bundle holding the session CA alone.
	if err := r.MkdirAll(rel(path.Dir(guestcfg.SystemBundle)), 0o755); err != nil {
		return fmt.Errorf("trust session CA: %w", err)
	}
	pemData := append(bytes.TrimSpace(t.PEM), '\n')
	if err := replaceFile(r, rel(guestcfg.SessionCAFile), pemData); err != nil {
		return err
	}
	bundle, err := readBundle(r, rel(guestcfg.SystemBundle))
	if err != nil {
		return err
	}
	if bytes.Contains(bundle, bytes.TrimSpace(t.PEM)) {
		return nil
	}
	if len(bundle) > 0 && bundle[len(bundle)-1] != '\n' {
		bundle = append(bundle, '\n')
	}
	return replaceFile(r, rel(guestcfg.SystemBundle), append(bundle, pemData...))
}

func rel(p string) string { return strings.TrimPrefix(p, "/") }

// readBundle returns the bundle at p (nil when there is none); it must be a regular file.
func readBundle(r *os.Root, p string) ([]byte, error) {
	f, err := r.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("read /%s: %w", p, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read /%s: not a regular file", p)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxBundle+1))
	if err != nil || len(data) > maxBundle {
		return nil, fmt.Errorf("read /%s: unreadable or over %d bytes", p, maxBundle)
	}
	return data, nil
}

// replaceFile writes data to a new file beside p and renames it over p (mode 0644,
// owned by the caller: root).
func replaceFile(r *os.Root, p string, data []byte) error {
	tmp := p + ".brood-new"
	_ = r.Remove(tmp)
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("write /%s: %w", p, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = r.Rename(tmp, p)
	}
	if err != nil {
		_ = r.Remove(tmp)
		return fmt.Errorf("write /%s: %w", p, err)
	}
	return nil
}
