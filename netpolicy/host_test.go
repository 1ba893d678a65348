package netpolicy

import (
	"errors"
	"strings"
	"testing"
)

func TestParsePatternRejects(t *testing.T) {
	for _, s := range []string{
		"", ".", "*", "*.", "*github.com", "a.*.com", "**.a.com", "*.*.a.com", "*.com", "*.com.",
		"exa mple.com", "a..b", ".a.com", "a.com..", "-a.com", "a-.com", "a/b.com", "a:b.com",
		"a_b.com", "ex\u00e4mple.com", "a.com\x00", strings.Repeat("a", 64) + ".com",
		strings.Repeat("abcdefghi.", 26) + "com",
	} {
		if p, err := ParsePattern(s); !errors.Is(err, ErrBadPattern) {
			t.Errorf("ParsePattern(%q) = %+v, %v; want ErrBadPattern", s, p, err)
		}
	}
}

func TestPatternMatch(t *testing.T) {
	gh, err := ParsePattern("github.com")
	if err != nil {
		t.Fatal(err)
	}
	ghu, err := ParsePattern("*.githubusercontent.com")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		p    Pattern
		name string
		want bool
	}{
		{gh, "github.com", true},
		{gh, "GitHub.COM.", true},
		{gh, "evilgithub.com", false},
		{gh, "github.com.attacker.test", false},
		{gh, "api.github.com", false},
		{gh, "github.co", false},
		{gh, "github.com..", false},
		{ghu, "a.b.githubusercontent.com", true},
		{ghu, "RAW.GitHubUserContent.com.", true},
		{ghu, "githubusercontent.com", false},
		{ghu, "githubusercontent.com.", false},
		{ghu, "evilgithubusercontent.com", false},
		{ghu, "a.githubusercontent.com.attacker.test", false},
		{ghu, ".githubusercontent.com", false},
		{Pattern{}, "github.com", false},
		{Pattern{}, "", false},
	}
	for _, tt := range tests {
		if got := tt.p.Match(tt.name); got != tt.want {
			t.Errorf("%v.Match(%q) = %v, want %v", tt.p, tt.name, got, tt.want)
		}
	}
}

func TestPatternCovers(t *testing.T) {
	mp := func(s string) Pattern {
		p, err := ParsePattern(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		p, q string
		want bool
	}{
		{"*.example.com", "a.example.com", true},
		{"*.example.com", "*.a.example.com", true},
		{"*.example.com", "*.example.com", true},
		{"*.example.com", "example.com", false},
		{"a.example.com", "*.example.com", false},
		{"*.a.example.com", "*.example.com", false},
		{"example.com", "example.com", true},
	}
	for _, tt := range tests {
		if got := mp(tt.p).Covers(mp(tt.q)); got != tt.want {
			t.Errorf("%s covers %s = %v, want %v", tt.p, tt.q, got, tt.want)
		}
	}
}

func TestParsePort(t *testing.T) {
	good := map[string]Port{"443": {TCP, 443}, "22/tcp": {TCP, 22}, "53/UDP": {UDP, 53}, "65535": {TCP, 65535}}
	for s, want := range good {
		if got, err := ParsePort(s); err != nil || got != want {
			t.Errorf("ParsePort(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0", "65536", "-1", "+443", "0443", "443/sctp", "443/", "https", " 443"} {
		if _, err := ParsePort(s); !errors.Is(err, ErrBadPort) {
			t.Errorf("ParsePort(%q) err = %v, want ErrBadPort", s, err)
		}
	}
	e, err := ParseAllowHostFlag("git.example.org:443,22,443/tcp")
	if err != nil {
		t.Fatal(err)
	}
	if got := e.String(); got != "git.example.org (22/tcp, 443/tcp)" {
		t.Errorf("entry = %q", got)
	}
	if e, _ := ParseAllowHostFlag("Example.ORG."); e.String() != "example.org" || e.EffectivePorts()[0] != (Port{TCP, 443}) {
		t.Errorf("default entry = %v %v", e, e.EffectivePorts())
	}
}

// FuzzParsePattern checks that whatever ParsePattern accepts is canonical, round-trips, and
// matches names only label-anchored.
func FuzzParsePattern(f *testing.F) {
	for _, s := range []string{"github.com", "*.githubusercontent.com", "*github.com", "a.*.com", "*", "GitHub.COM.", "xn--bcher-kva.example", "a..b"} {
		f.Add(s, "x.github.com")
	}
	f.Fuzz(func(t *testing.T, s, name string) {
		p, err := ParsePattern(s)
		if err != nil {
			if !errors.Is(err, ErrBadPattern) {
				t.Fatalf("ParsePattern(%q) error %v does not wrap ErrBadPattern", s, err)
			}
			return
		}
		if strings.Contains(p.Name, "*") || p.Name != strings.ToLower(p.Name) || strings.HasSuffix(p.Name, ".") || p.Name == "" {
			t.Fatalf("ParsePattern(%q) = %+v, not canonical", s, p)
		}
		q, err := ParsePattern(p.String())
		if err != nil || q != p {
			t.Fatalf("round trip of %q: %+v, %v", p.String(), q, err)
		}
		if p.Wildcard && p.Match(p.Name) {
			t.Fatalf("%v matches its apex", p)
		}
		if !p.Match(strings.ToUpper(p.Name)+".") && !p.Wildcard {
			t.Fatalf("%v does not match its own name", p)
		}
		if p.Match(name) {
			n, _ := CanonicalName(name)
			if n != p.Name && !strings.HasSuffix(n, "."+p.Name) {
				t.Fatalf("%v matches %q, which is not label-anchored", p, name)
			}
		}
	})
}
