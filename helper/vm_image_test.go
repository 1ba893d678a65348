package helper

import (
	"os"
	"path/filepath"
	"testing"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox/store"
)

// TestDescribeImage: start_vm names the store file it boots and the digest in its name;
// a file that is not a store image name gets its name and no digest.
func TestDescribeImage(t *testing.T) {
	dir := t.TempDir()
	digest := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, c := range []struct{ file, digest string }{
		{store.ImageFile("codex", digest), digest[:32]},
		{"odd.img", ""},
	} {
		f, err := os.Create(filepath.Join(dir, c.file))
		if err != nil {
			t.Fatal(err)
		}
		var info api.VMInfo
		describeImage(&info, f)
		f.Close()
		if info.ImageFile != c.file || info.ImageDigest != c.digest {
			t.Errorf("%s: file %q digest %q, want digest %q", c.file, info.ImageFile, info.ImageDigest, c.digest)
		}
	}
	var info api.VMInfo
	if describeImage(&info, nil); info.ImageFile != "" {
		t.Errorf("no image: %+v", info)
	}
}
