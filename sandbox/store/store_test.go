package store

import (
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	const d = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	if f := ImageFile("test", d); f != "test-0123456789abcdef0123456789abcdef.erofs" {
		t.Errorf("ImageFile = %q", f)
	}
	if f := InitramfsFile(d); f != "initramfs-0123456789abcdef0123456789abcdef.cpio.gz" || !ValidInitramfsFile(f) {
		t.Errorf("InitramfsFile = %q", f)
	}
	if n, dg, ok := ParseImageFile(ImageFile("my-img.2", d)); !ok || n != "my-img.2" || dg != d[:DigestLen] {
		t.Errorf("ParseImageFile = %q %q %v", n, dg, ok)
	}
	for _, bad := range []string{"test-0123.erofs", ".build-test-1", "test-0123456789abcdef0123456789abcdef.ext4",
		"Test-0123456789abcdef0123456789abcdef.erofs", "../x-0123456789abcdef0123456789abcdef.erofs"} {
		if _, _, ok := ParseImageFile(bad); ok {
			t.Errorf("ParseImageFile(%q) ok", bad)
		}
	}
	for name, ok := range map[string]bool{"test": true, "codex": true, "a.b_c-d": true, "": false, ".": false, "..": false,
		"../x": false, "a/b": false, "Test": false, "-x": false, strings.Repeat("a", 64): false} {
		if ValidImageName(name) != ok {
			t.Errorf("ValidImageName(%q) = %v", name, !ok)
		}
	}
	for rel, ok := range map[string]bool{"6.1.0-57-amd64": true, "amd64": false, "../6": false, "6 1": false, "": false} {
		if ValidRelease(rel) != ok {
			t.Errorf("ValidRelease(%q) = %v", rel, !ok)
		}
	}
	defer func() {
		if recover() == nil {
			t.Errorf("ImageFile with a short digest did not panic")
		}
	}()
	ImageFile("test", "abc")
}

func TestLayoutPaths(t *testing.T) {
	l := New("/srv/brood")
	for got, want := range map[string]string{
		l.Kernels():            "/srv/brood/kernels",
		l.Kernel("6.1.0-1"):    "/srv/brood/kernels/6.1.0-1",
		l.Initramfs("6.1.0-1"): "/srv/brood/kernels/6.1.0-1/initramfs",
		l.Images():             "/srv/brood/images",
		New("").Root:           DefaultRoot,
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}
