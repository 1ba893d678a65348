package netpolicy

import (
	"errors"
	"strings"
	"testing"
)

// TestSpecialUseNamesRefusedInAllow: no layer may allow localhost, *.local, home.arpa and
// the other special-use names; a name that only ends in the same letters is fine, and
// every layer may still deny them.
func TestSpecialUseNamesRefusedInAllow(t *testing.T) {
	refused := []string{"localhost", "foo.localhost", "*.foo.localhost", "printer.local", "*.corp.local", "nas.home.arpa", "x.onion", "1.0.0.127.in-addr.arpa", "invalid", "a.invalid"}
	for _, name := range refused {
		p, err := ParsePattern(name)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", name, err)
		}
		for _, layer := range []Layer{LayerSystem, LayerUser, LayerFlags} {
			err := grantable(p, Source{Layer: layer})
			if !errors.Is(err, ErrSpecialUse) || !errors.Is(err, ErrBadPattern) || !strings.Contains(err.Error(), name) {
				t.Errorf("grantable(%q, %s) = %v, want ErrSpecialUse naming it", name, layer, err)
			}
		}
	}
	for _, name := range []string{"mylocalhost.com", "local.example.com", "arpa.example.org", "api.openai.com", "x.test"} {
		p, err := ParsePattern(name)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", name, err)
		}
		if err := grantable(p, Source{Layer: LayerFlags}); err != nil {
			t.Errorf("grantable(%q) = %v, want allowed", name, err)
		}
	}
}
