package diff

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// digestOf2GiBZeros is the content digest of 2 GiB of zeros, computed apart from package
// digest (Python hashlib): SHA-256("brood-content-v1\x00" || 32768 x 0x00 || size as
// 8 bytes big-endian).
const digestOf2GiBZeros = "d1cf7e71db062b905226dfadcade53c5a6d376d3ce26261c5df9e4826daea24a"

// TestHashHugeSparseFileBoundedMemory: a 2 GiB sparse file added in S is digested by
// Compute without reading its hole; the heap allocated during the whole Compute stays far
// below the file size (one 64 KiB buffer plus bookkeeping).
func TestHashHugeSparseFileBoundedMemory(t *testing.T) {
	w, s, _ := setup(t, nil, true)
	writeFiles(t, w, map[string]string{"small.txt": "x"})
	m := testSnapshot(t, w, s, true)
	f, err := os.Create(filepath.Join(s, "huge.img"))
	must(t, err)
	must(t, f.Truncate(2<<30))
	must(t, f.Close())

	// The default limit (1 GiB) refuses it without reading it.
	var read bool
	got, err := Compute(context.Background(), w, s, m, Options{OnOpen: func(Tree, string) error { read = true; return nil }})
	must(t, err)
	if len(got) != 1 || got[0].Kind != KindRefused || read {
		t.Fatalf("over the default limit: %+v (read=%v), want refused unread", got, read)
	}

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, err = Compute(context.Background(), w, s, m, Options{MaxSize: -1})
	runtime.ReadMemStats(&after)
	must(t, err)
	if len(got) != 1 || got[0].Kind != KindAdded || got[0].NewSize != 2<<30 || !got[0].Binary {
		t.Fatalf("changes = %+v, want one binary 2 GiB addition", got)
	}
	if h := hex.EncodeToString(got[0].NewHash); h != digestOf2GiBZeros {
		t.Errorf("digest %s, want %s", h, digestOf2GiBZeros)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Errorf("Compute allocated %d bytes hashing a 2 GiB file, want < 4 MiB", alloc)
	}
}

func TestHashFileRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "f"), []byte("a\r\n"), 0o644))
	must(t, os.Symlink("f", filepath.Join(dir, "l")))
	sum, err := HashFile(filepath.Join(dir, "f"))
	must(t, err)
	if !bytes.Equal(sum, sha("a\r\n")) || bytes.Equal(sum, sha("a\n")) {
		t.Errorf("HashFile must hash raw bytes (CRLF kept): %x", sum)
	}
	if _, err := HashFile(filepath.Join(dir, "l")); err == nil {
		t.Errorf("HashFile followed a symlink")
	}
	if _, err := HashFile(dir); !errors.Is(err, ErrNotRegular) {
		t.Errorf("HashFile(dir) = %v, want ErrNotRegular", err)
	}
}

func TestIsBinary(t *testing.T) {
	if IsBinary([]byte("text\r\nonly\n")) || !IsBinary([]byte("a\x00b")) {
		t.Error("IsBinary misclassifies")
	}
	late := append(bytes.Repeat([]byte("a"), binarySniffLen), 0)
	if IsBinary(late) {
		t.Error("IsBinary looks past git's 8000 bytes")
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"d/f": "content"})
	must(t, os.Symlink("d", filepath.Join(dir, "ld")))
	b, err := ReadFile(dir, "d/f", sha("content"), 100)
	if err != nil || string(b) != "content" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	if _, err := ReadFile(dir, "d/f", sha("other"), 100); !errors.Is(err, ErrChanged) {
		t.Errorf("hash mismatch: %v, want ErrChanged", err)
	}
	if _, err := ReadFile(dir, "d/f", nil, 3); !errors.Is(err, ErrTooLarge) {
		t.Errorf("limit: %v, want ErrTooLarge", err)
	}
	if _, err := ReadFile(dir, "ld/f", nil, 100); err == nil {
		t.Errorf("ReadFile followed a symlinked directory")
	}
	if _, err := ReadFile(dir, "../"+filepath.Base(dir)+"/d/f", nil, 100); !errors.Is(err, ErrEscapesRoot) {
		t.Errorf("ReadFile escaped the root: %v", err)
	}
}

// TestJSONRoundTrip: raw name bytes survive the wire form exactly.
func TestJSONRoundTrip(t *testing.T) {
	in := []Change{
		{Path: "bad\xff\xfe/x", Kind: KindAdded, NewHash: sha("x"), NewMode: 0o644, SameAs: "old\xff"},
		{Path: "esc\x1b[31m\nname", Kind: KindRefused, Reason: "control or formatting character in name"},
		{Path: "ok.txt", Kind: KindModified, OldHash: sha("a"), NewHash: sha("b"), BecameBinary: true, Binary: true},
	}
	b, err := json.Marshal(in)
	must(t, err)
	if bytes.ContainsAny(b, "\x1b\n") {
		t.Errorf("JSON carries raw control bytes: %q", b)
	}
	var out []Change
	must(t, json.Unmarshal(b, &out))
	for i := range in {
		if in[i].Path != out[i].Path || in[i].SameAs != out[i].SameAs || !bytes.Equal(in[i].NewHash, out[i].NewHash) ||
			!bytes.Equal(in[i].OldHash, out[i].OldHash) || in[i].Kind != out[i].Kind || in[i].BecameBinary != out[i].BecameBinary {
			t.Errorf("round trip %d: %+v -> %+v", i, in[i], out[i])
		}
	}
}

// TestCaseCollisions: on a case-insensitive W, an added name that folds onto another
// name of W or S is refused, both sides named.
func TestCaseCollisions(t *testing.T) {
	w, s, _ := setup(t, nil, true)
	writeFiles(t, w, map[string]string{"README.md": "r", "src/Main.go": "m"})
	m := testSnapshot(t, w, s, true)
	writeFiles(t, s, map[string]string{"readme.MD": "evil", "src/main.go": "x", "other.txt": "o"})
	for _, mode := range []CaseMode{CaseInsensitive, CaseSensitive} {
		got, err := Compute(context.Background(), w, s, m, Options{Case: mode})
		must(t, err)
		gm := byPath(got)
		want := KindAdded
		if mode == CaseInsensitive {
			want = KindRefused
		}
		for _, p := range []string{"readme.MD", "src/main.go"} {
			if gm[p].Kind != want {
				t.Errorf("case mode %d: %s is %s (%s), want %s", mode, p, gm[p].Kind, gm[p].Reason, want)
			}
		}
		if gm["other.txt"].Kind != KindAdded {
			t.Errorf("other.txt: %+v", gm["other.txt"])
		}
		if mode == CaseInsensitive && gm["readme.MD"].Reason != "case collision with README.md on a case-insensitive workspace" {
			t.Errorf("reason %q", gm["readme.MD"].Reason)
		}
	}
	// On this ext4/tmpfs test directory, auto-detection says case-sensitive.
	got, err := Compute(context.Background(), w, s, m, Options{})
	must(t, err)
	if byPath(got)["readme.MD"].Kind != KindAdded {
		t.Errorf("auto case mode on a case-sensitive file system refused the name")
	}
}
