package helper

import (
	"os"
	"path/filepath"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox/store"
)

// describeImage sets info's image file and digest from the image file the VM boots (its
// store name, "<name>-<hex32>.erofs"; store.ParseImageFile). A file whose name is not a
// store image name leaves the digest empty.
func describeImage(info *api.VMInfo, image *os.File) {
	if image == nil {
		return
	}
	info.ImageFile = filepath.Base(image.Name())
	if _, digest, ok := store.ParseImageFile(info.ImageFile); ok {
		info.ImageDigest = digest
	}
}
