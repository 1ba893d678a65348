package placeholder

import (
	"encoding/base64"
	"strings"
	"testing"
	"unicode"

	"brood.dev/brood/helper/api"
)

func TestMinLenIsAPIs(t *testing.T) {
	if MinLen != api.MinPlaceholder {
		t.Fatalf("MinLen %d, api.MinPlaceholder %d", MinLen, api.MinPlaceholder)
	}
}

// TestShapes: the prefix a CLI checks and the length are kept; the rest is new.
func TestShapes(t *testing.T) {
	cases := []struct{ real, prefix string }{
		{"sk-proj-" + strings.Repeat("aB3", 52), "sk-proj-"},
		{"sk-ant-api03-" + strings.Repeat("xY9_", 23) + "AA", "sk-ant-api03-"},
		{"sk-ant-oat01-" + strings.Repeat("q", 95), "sk-ant-oat01-"},
		{"AIza" + strings.Repeat("Sy0", 11) + "Ab", "AIza"}, // 39 bytes, Google API key
		{"ya29.a0AfH6SM" + strings.Repeat("z", 150), "ya29."},
		{"ghp_" + strings.Repeat("A1", 18), "ghp_"},
		{"github_pat_" + strings.Repeat("1a", 40), "github_pat_"},
		{"xoxb-123456789012-abcdefghijklmnop", "xoxb-"},
	}
	for _, c := range cases {
		p := New(c.real)
		if !strings.HasPrefix(p, c.prefix) || len(p) != len(c.real) || p == c.real {
			t.Errorf("New(%.16s…) = %q: want prefix %q and length %d", c.real, p, c.prefix, len(c.real))
		}
		if strings.Contains(p[len(c.prefix):], c.real[len(c.prefix):len(c.prefix)+8]) {
			t.Errorf("New(%.16s…) keeps part of the secret tail", c.real)
		}
		for i := range p {
			if classOf(p[i]) != classOf(c.real[i]) {
				t.Errorf("New(%.16s…) byte %d: class changed", c.real, i)
				break
			}
		}
		if New(c.real) == p {
			t.Errorf("two placeholders of %.16s… are equal", c.real)
		}
	}
}

func classOf(c byte) rune {
	switch r := rune(c); {
	case unicode.IsDigit(r):
		return 'd'
	case unicode.IsLower(r):
		return 'l'
	case unicode.IsUpper(r):
		return 'u'
	}
	return rune(c)
}

// TestShort: a short secret (a password) gets a placeholder of at least MinLen bytes
// that shares nothing with it.
func TestShort(t *testing.T) {
	p := New("hunter2")
	if len(p) < MinLen || strings.Contains(p, "hunter") {
		t.Fatalf("New(short) = %q", p)
	}
}

// TestOddBytes: bytes outside [A-Za-z0-9._-] never appear in a placeholder.
func TestOddBytes(t *testing.T) {
	p := New("1//0gAbc+/=xyz" + strings.Repeat("+", 40))
	for i := range len(p) {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			t.Fatalf("placeholder %q holds %q", p, c)
		}
	}
}

// TestJWT: a JWT keeps its header and claims (CLIs read the expiry and account) and gets a
// new signature of the same length.
func TestJWT(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	sig := enc([]byte(strings.Repeat("s", 256)))
	real := enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(`{"exp":1900000000,"sub":"x"}`)) + "." + sig
	p := New(real)
	parts, rp := strings.Split(p, "."), strings.Split(real, ".")
	if len(parts) != 3 || parts[0] != rp[0] || parts[1] != rp[1] {
		t.Fatalf("header or claims changed: %q", p)
	}
	if parts[2] == rp[2] || len(parts[2]) != len(rp[2]) {
		t.Fatalf("signature %q not new or not of the same length", parts[2])
	}
}

func TestKnown(t *testing.T) {
	if !Known("ghp_"+strings.Repeat("a", 36)) || Known("sk-"+strings.Repeat("a", 40)) || Known("ghp_short") {
		t.Fatal("Known is wrong")
	}
}

// TestShapeShown: what docs/secrets.md says a placeholder shows of a short, human-chosen
// password: each digit, lower- and upper-case position of the value as it is, a byte of
// another class as some letter or digit, then random letters and digits up to 22 bytes.
func TestShapeShown(t *testing.T) {
	real := "Summer2024!x"
	p := New(real)
	if len(p) != 22 {
		t.Fatalf("New(%q) = %q: length %d, want 22", real, p, len(p))
	}
	for i := range len(real) {
		if real[i] == '!' {
			if classOf(p[i]) == '!' {
				t.Errorf("byte %d kept as %q", i, p[i])
			}
			continue
		}
		if classOf(p[i]) != classOf(real[i]) {
			t.Errorf("New(%q) = %q: byte %d changed class", real, p, i)
		}
	}
}
