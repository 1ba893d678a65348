package placeholder

import (
	"crypto/rand"
	"encoding/base64"
	"math/big"
	"strings"
)

// MinLen is the shortest placeholder New returns, in bytes; it equals helper/api's
// MinPlaceholder (a test checks).
const MinLen = 20

// Known reports whether value starts like a known credential: one of knownPrefixes other
// than the short, common "sk-", followed by at least 16 bytes.
func Known(value string) bool {
	for _, p := range knownPrefixes {
		if p != "sk-" && strings.HasPrefix(value, p) && len(value) >= len(p)+16 {
			return true
		}
	}
	return false
}

// knownPrefixes are credential prefixes that CLIs and SDKs check or that name the kind of a
// value; a placeholder keeps the longest one that starts the real value. Sources: the
// providers' key formats (OpenAI "sk-proj-", "sk-svcacct-", "sk-"; Anthropic
// "sk-ant-api03-", OAuth "sk-ant-oat01-" and "sk-ant-ort01-"; Google API keys "AIza",
// OAuth access tokens "ya29."; OpenRouter "sk-or-v1-"; GitHub's token formats "ghp_",
// "gho_", "ghu_", "ghs_", "github_pat_").
var knownPrefixes = []string{
	"sk-ant-api03-", "sk-ant-oat01-", "sk-ant-ort01-", "sk-proj-", "sk-svcacct-", "sk-or-v1-",
	"sk-", "AIza", "ya29.", "github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "glpat-", "hf_", "xai-",
}

// New returns a new random placeholder of real's shape:
//
//   - a JWT (three base64url parts, the first two decoding to JSON objects) keeps its
//     header and claims, which CLIs read (expiry, account), and gets a random signature
//     of the same length: the value no longer verifies anywhere;
//   - otherwise the longest known prefix (knownPrefixes), or else the leading run up to
//     the last '-', '_' or '.' in the first 16 bytes, is kept, and every later byte is
//     replaced by a random one of its class (digit, lower, upper letter; anything else
//     becomes a letter or digit), so lengths and character classes match;
//   - a result shorter than MinLen is padded with random letters and digits.
//
// The random part has at least 128 bits unless real is shorter, which the padding then
// makes up. The result uses only [A-Za-z0-9._-] (helper/api SecretBinding.Placeholder).
func New(real string) string {
	if p, ok := jwtPlaceholder(real); ok {
		return p
	}
	keep := prefixLen(real)
	var b strings.Builder
	b.WriteString(sanitizePrefix(real[:keep]))
	for i := keep; i < len(real); i++ {
		b.WriteByte(randomLike(real[i]))
	}
	for b.Len() < MinLen || b.Len()-keep < 22 {
		b.WriteByte(randomFrom(alnum))
	}
	return b.String()
}

// prefixLen is the length of real's prefix that a placeholder keeps.
func prefixLen(real string) int {
	for _, p := range knownPrefixes {
		if strings.HasPrefix(real, p) && len(real) > len(p) {
			return len(p)
		}
	}
	keep := 0
	for i := 0; i < len(real) && i < 16; i++ {
		if c := real[i]; c == '-' || c == '_' || c == '.' {
			keep = i + 1
		}
	}
	if len(real)-keep < 16 {
		return 0
	}
	return keep
}

// sanitizePrefix maps any byte outside [A-Za-z0-9._-] of a kept prefix to a letter.
func sanitizePrefix(p string) string {
	out := []byte(p)
	for i, c := range out {
		if !isPlaceholderByte(c) {
			out[i] = randomFrom(lower)
		}
	}
	return string(out)
}

func isPlaceholderByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

const (
	digits = "0123456789"
	lower  = "abcdefghijklmnopqrstuvwxyz"
	upper  = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	alnum  = digits + lower + upper
)

// randomLike returns a random byte of c's class.
func randomLike(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return randomFrom(digits)
	case c >= 'a' && c <= 'z':
		return randomFrom(lower)
	case c >= 'A' && c <= 'Z':
		return randomFrom(upper)
	case c == '-' || c == '_':
		return c
	}
	return randomFrom(alnum)
}

func randomFrom(set string) byte {
	n, err := rand.Int(rand.Reader, big.NewInt(int64(len(set))))
	if err != nil {
		panic("crypto/rand: " + err.Error()) // crypto/rand.Read never fails on Linux 3.17+
	}
	return set[n.Int64()]
}

// jwtPlaceholder returns real with a random signature when real is a JWT (RFC 7519: three
// base64url parts without padding, the first two JSON objects).
func jwtPlaceholder(real string) (string, bool) {
	parts := strings.Split(real, ".")
	if len(parts) != 3 || len(parts[2]) < 16 {
		return "", false
	}
	for _, p := range parts[:2] {
		data, err := base64.RawURLEncoding.DecodeString(p)
		if err != nil || len(data) < 2 || data[0] != '{' || data[len(data)-1] != '}' {
			return "", false
		}
	}
	sig := make([]byte, base64.RawURLEncoding.DecodedLen(len(parts[2])))
	if len(sig) < 16 {
		sig = make([]byte, 16)
	}
	rand.Read(sig)
	return parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(sig), true
}
