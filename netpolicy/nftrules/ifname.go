package nftrules

import (
	"fmt"
	"strings"
)

// IfNameSize is the kernel's IFNAMSIZ (include/uapi/linux/if.h): 16 bytes including the
// terminating NUL, so a name has at most 15 bytes.
const IfNameSize = 16

// TapPrefix starts the name of every tap device brood creates (TapName: "brd" + session
// id). The helper's cleanup deletes every tap with this prefix, and the table's drop rules
// match it, so nothing else on the host may use it.
const TapPrefix = "brd"

// ValidateIfName checks name the way the kernel's dev_valid_name does: 1–15 bytes, not "."
// or "..", no '/', ':', whitespace or NUL. Errors wrap ErrBadIfName.
func ValidateIfName(name string) error {
	if len(name) == 0 || len(name) >= IfNameSize || name == "." || name == ".." {
		return fmt.Errorf("interface name %q: %w", name, ErrBadIfName)
	}
	if strings.ContainsAny(name, "/: \t\n\v\f\r\x00") {
		return fmt.Errorf("interface name %q: %w", name, ErrBadIfName)
	}
	return nil
}

// IfNameBytes returns name NUL-padded to IfNameSize bytes, the form an exact nft
// iifname/oifname comparison needs (a shorter comparison is a prefix match: "brd1" would
// also match "brd12").
func IfNameBytes(name string) ([]byte, error) {
	if err := ValidateIfName(name); err != nil {
		return nil, err
	}
	b := make([]byte, IfNameSize)
	copy(b, name)
	return b, nil
}

// ValidateSessionID requires 1–12 lower-case ASCII letters and digits, so that the tap name
// TapPrefix+id fits in 15 bytes and chain and set names need no quoting.
func ValidateSessionID(id string) error {
	if len(id) == 0 || len(id) > IfNameSize-1-len(TapPrefix) {
		return fmt.Errorf("session id %q: length: %w", id, ErrBadSession)
	}
	for _, c := range []byte(id) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return fmt.Errorf("session id %q: byte %q: %w", id, c, ErrBadSession)
		}
	}
	return nil
}

// TapName returns the tap device name of session id ("brd" + id).
func TapName(id string) (string, error) {
	if err := ValidateSessionID(id); err != nil {
		return "", err
	}
	return TapPrefix + id, nil
}
