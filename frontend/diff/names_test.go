package diff

import "testing"

func TestFoldName(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"README", "readme"},
		{"caf\u00e9", "cafe\u0301"},                  // NFC and NFD spellings: one name on APFS
		{"CAF\u00c9", "cafe\u0301"},                  // and case on top
		{"stra\u00dfe", "STRASSE"},                   // full case folding
		{".g\u200cit", ".git"},                       // HFS+ ignorable code point
		{"\u212bngstr\u00f6m", "\u00e5ngstr\u00f6m"}, // ANGSTROM SIGN
	} {
		if foldName(tc.a) != foldName(tc.b) {
			t.Errorf("foldName(%q) = %q, foldName(%q) = %q: want equal", tc.a, foldName(tc.a), tc.b, foldName(tc.b))
		}
	}
	for _, tc := range []struct{ a, b string }{{"a", "b"}, {"cafe", "caf\u00e9"}, {".git", ".gît"}} {
		if foldName(tc.a) == foldName(tc.b) {
			t.Errorf("foldName(%q) == foldName(%q)", tc.a, tc.b)
		}
	}
}
