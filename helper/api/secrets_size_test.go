package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestEncodedSize: the size Validate checks, computed without encoding the values, is
// json.Marshal's, for values holding every printable ASCII byte but space (those json
// escapes among them) and for the largest session.
func TestEncodedSize(t *testing.T) {
	var all strings.Builder
	for c := byte('!'); c <= '~'; c++ {
		all.WriteByte(c)
	}
	a := goodBinding()
	a.Value = all.String() + `<<&&>>""\\`
	b := goodBinding()
	b.Name, b.Placeholder, b.Value = "second", strings.Repeat("p", MaxSecretValue), strings.Repeat("v", MaxSecretValue)
	for _, s := range []SessionSecrets{{}, {Bindings: []SecretBinding{a}}, {Bindings: []SecretBinding{a, b}}} {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.encodedSize(); err != nil || got != len(want) {
			t.Errorf("%d bindings: encodedSize %d, %v; json.Marshal %d bytes", len(s.Bindings), got, err, len(want))
		}
	}
}
