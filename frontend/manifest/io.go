package manifest

import (
	"bufio"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"brood.dev/brood/internal/atomicfile"
)

// ErrVersion is returned by Read for a manifest written by an unknown format version.
var ErrVersion = errors.New("unsupported manifest format version")

// Write stores m at path atomically (package atomicfile: temp file, fsync, rename, fsync
// of the directory), mode 0600. The encoding is encoding/gob, which keeps path bytes exactly.
func Write(path string, m *Manifest) error {
	m.Version = FormatVersion
	sort.Slice(m.Entries, func(i, j int) bool { return m.Entries[i].Path < m.Entries[j].Path })
	err := atomicfile.Write(path, func(w io.Writer) error { return gob.NewEncoder(w).Encode(m) })
	if err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	return nil
}

// Read loads the manifest at path. It returns ErrVersion (wrapped) for another format
// version, saying why for version 1 (its hashes are not comparable with content digests);
// entries come back sorted by Path.
func Read(path string) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	defer f.Close()
	var m Manifest
	if err := gob.NewDecoder(bufio.NewReaderSize(f, 1<<20)).Decode(&m); err != nil {
		return nil, fmt.Errorf("decode manifest %q: %w", path, err)
	}
	switch {
	case m.Version == 1:
		return nil, fmt.Errorf("manifest %q is format version 1, written by an older brood: it "+
			"records plain SHA-256 content hashes, which this brood (format %d, block content "+
			"digests) cannot compare: %w", path, FormatVersion, ErrVersion)
	case m.Version != FormatVersion:
		return nil, fmt.Errorf("manifest %q version %d (this brood reads %d): %w", path, m.Version, FormatVersion, ErrVersion)
	}
	return &m, nil
}

// Lookup returns the entry for path (binary search), or nil.
func (m *Manifest) Lookup(path string) *Entry {
	i := sort.Search(len(m.Entries), func(i int) bool { return m.Entries[i].Path >= path })
	if i < len(m.Entries) && m.Entries[i].Path == path {
		return &m.Entries[i]
	}
	return nil
}
