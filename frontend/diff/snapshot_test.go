package diff

import (
	"testing"

	"brood.dev/brood/frontend/diff/difftest"
	"brood.dev/brood/frontend/digest"
	"brood.dev/brood/frontend/manifest"
)

func testSnapshot(t testing.TB, w, s string, hash bool) *manifest.Manifest {
	t.Helper()
	m, err := difftest.Snapshot(w, s, hash)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func writeFiles(t testing.TB, root string, files map[string]string) {
	t.Helper()
	if err := difftest.WriteFiles(root, files); err != nil {
		t.Fatal(err)
	}
}

// sha is the content digest of s (package digest), the value Change hashes hold.
func sha(s string) []byte {
	return digest.Bytes([]byte(s))
}
