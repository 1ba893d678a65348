package assets

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestFindGuest(t *testing.T) {
	p := filepath.Join(t.TempDir(), "brood-guest")
	os.WriteFile(p, []byte("\x7fELF"), 0o755)
	t.Setenv("BROOD_GUEST", p)
	if got, err := FindGuest(); err != nil || got != p {
		t.Errorf("FindGuest = %q, %v; want $BROOD_GUEST %q", got, err, p)
	}
	t.Setenv("BROOD_GUEST", filepath.Join(t.TempDir(), "missing"))
	saved := GuestPaths
	GuestPaths = nil
	defer func() { GuestPaths = saved }()
	if _, err := FindGuest(); !errors.Is(err, ErrNoGuest) {
		t.Errorf("FindGuest without a binary: %v, want ErrNoGuest", err)
	}
}
