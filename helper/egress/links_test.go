package egress

import (
	"errors"
	"testing"
)

// TestIPv6ConfRefusesGlobalSwitches: only single interfaces get IPv6 forwarding; the
// global "all" and "default" entries and names that would walk elsewhere are refused
// before anything is opened.
func TestIPv6ConfRefusesGlobalSwitches(t *testing.T) {
	c, err := OpenIPv6Conf()
	if errors.Is(err, ErrNoIPv6Forwarding) {
		t.Skipf("no per-interface IPv6 forwarding here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, name := range []string{"all", "default", "", "../conf/all", "lo/../all", "brd0123456789abc", "a b"} {
		if err := c.EnableForwarding(name); !errors.Is(err, ErrConfig) {
			t.Errorf("EnableForwarding(%q) = %v, want ErrConfig", name, err)
		}
	}
}
