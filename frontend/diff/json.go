package diff

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// jsonChange is the wire form of a Change in `brood diff --json`:
//
//   - path is the name as a JSON string when it is valid UTF-8 (control bytes appear as
//     JSON escapes such as "\n" or "\u001b", never raw). When the name is not valid UTF-8,
//     path holds a lossy rendering (invalid bytes as U+FFFD) for display only, and
//     path_b64 holds the exact bytes, standard base64 (RFC 4648 §4). Consumers must
//     prefer path_b64 when present. same_as / same_as_b64 follow the same rule.
//   - old_digest / new_digest are lowercase hex content digests (package digest: SHA-256
//     over 64 KiB block hashes, format "brood-content-v1"; not the SHA-256 of the file, so
//     `sha256sum` does not reproduce them).
//   - old_mode / new_mode are permission bits as numbers (e.g. 420 for 0644).
type jsonChange struct {
	Path         string `json:"path"`
	PathB64      string `json:"path_b64,omitempty"`
	Kind         Kind   `json:"kind"`
	OldMode      uint32 `json:"old_mode"`
	NewMode      uint32 `json:"new_mode"`
	Reason       string `json:"reason,omitempty"`
	Risk         string `json:"risk,omitempty"`
	OldHash      string `json:"old_digest,omitempty"`
	NewHash      string `json:"new_digest,omitempty"`
	OldSize      int64  `json:"old_size"`
	NewSize      int64  `json:"new_size"`
	Binary       bool   `json:"binary,omitempty"`
	BecameBinary bool   `json:"became_binary,omitempty"`
	SameAs       string `json:"same_as,omitempty"`
	SameAsB64    string `json:"same_as_b64,omitempty"`
}

// MarshalJSON encodes c in the wire form described on jsonChange.
func (c Change) MarshalJSON() ([]byte, error) {
	j := jsonChange{
		Kind: c.Kind, OldMode: c.OldMode, NewMode: c.NewMode, Reason: c.Reason, Risk: c.Risk,
		OldSize: c.OldSize, NewSize: c.NewSize, Binary: c.Binary, BecameBinary: c.BecameBinary,
	}
	j.Path, j.PathB64 = rawString(c.Path)
	j.SameAs, j.SameAsB64 = rawString(c.SameAs)
	if c.OldHash != nil {
		j.OldHash = hex.EncodeToString(c.OldHash)
	}
	if c.NewHash != nil {
		j.NewHash = hex.EncodeToString(c.NewHash)
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes the wire form, taking exact bytes from path_b64 when present.
func (c *Change) UnmarshalJSON(b []byte) error {
	var j jsonChange
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*c = Change{
		Path: j.Path, Kind: j.Kind, OldMode: j.OldMode, NewMode: j.NewMode, Reason: j.Reason,
		Risk: j.Risk, OldSize: j.OldSize, NewSize: j.NewSize, Binary: j.Binary,
		BecameBinary: j.BecameBinary, SameAs: j.SameAs,
	}
	var err error
	if j.PathB64 != "" {
		if c.Path, err = decodeB64(j.PathB64); err != nil {
			return fmt.Errorf("decode path_b64: %w", err)
		}
	}
	if j.SameAsB64 != "" {
		if c.SameAs, err = decodeB64(j.SameAsB64); err != nil {
			return fmt.Errorf("decode same_as_b64: %w", err)
		}
	}
	if j.OldHash != "" {
		if c.OldHash, err = hex.DecodeString(j.OldHash); err != nil {
			return fmt.Errorf("decode old_digest: %w", err)
		}
	}
	if j.NewHash != "" {
		if c.NewHash, err = hex.DecodeString(j.NewHash); err != nil {
			return fmt.Errorf("decode new_digest: %w", err)
		}
	}
	return nil
}

// rawString returns s for a JSON string field and, when s is not valid UTF-8, its exact
// bytes in base64 for the companion _b64 field.
func rawString(s string) (str, b64 string) {
	if utf8.ValidString(s) {
		return s, ""
	}
	return s, base64.StdEncoding.EncodeToString([]byte(s))
}

func decodeB64(s string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	return string(b), err
}
