package netpolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/testenv"
)

const goodPolicy = `
max_profile = "standard"
default_profile = "locked"
forbid_allow_host = true
allow_hosts = ["llm-gw.corp.example"]
deny_hosts = ["*.paste.example"]
code_hosts = ["git.corp.example"]
[[host]]
name = "apt.corp.example"
ports = ["80", "443/tcp"]
`

func writePolicy(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "brood")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadSystemPolicy(t *testing.T) {
	me := uint32(os.Getuid())
	sp, err := loadSystemPolicy(writePolicy(t, goodPolicy, 0o644), me)
	if err != nil {
		t.Fatal(err)
	}
	if sp.MaxProfile == nil || *sp.MaxProfile != Standard || sp.DefaultProfile == nil || *sp.DefaultProfile != Locked || !sp.ForbidAllowHost ||
		len(sp.Allow) != 2 || sp.Allow[1].String() != "apt.corp.example (80/tcp, 443/tcp)" ||
		len(sp.Deny) != 1 || len(sp.CodeHosts) != 1 {
		t.Errorf("parsed policy = %+v", sp)
	}
	if sum := sha256.Sum256([]byte(goodPolicy)); sp.Digest != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("Digest = %q, want the sha256 of the file read", sp.Digest)
	}

	if sp, err := loadSystemPolicy(filepath.Join(t.TempDir(), "policy.toml"), me); sp != nil || err != nil {
		t.Errorf("missing file: %v, %v; want no policy", sp, err)
	}

	bad := map[string]string{
		"syntax":          "max_profile = ",
		"unknown key":     "max_profil = \"locked\"",
		"bad profile":     "max_profile = \"open\"",
		"bad pattern":     "deny_hosts = [\"*github.com\"]",
		"bad port":        "[[host]]\nname = \"a.example\"\nports = [\"0\"]",
		"wrong type":      "forbid_allow_host = \"yes\"",
		"unknown in host": "[[host]]\nname = \"a.example\"\nport = 22",
		"bad default":     "default_profile = \"open\"",
		"default > max":   "max_profile = \"locked\"\ndefault_profile = \"standard\"",
	}
	for name, content := range bad {
		sp, err := loadSystemPolicy(writePolicy(t, content, 0o644), me)
		if err == nil || sp != nil {
			t.Errorf("%s: policy %+v loaded, want error", name, sp)
		}
	}
	for _, mode := range []os.FileMode{0o664, 0o646, 0o666} {
		if _, err := loadSystemPolicy(writePolicy(t, goodPolicy, mode), me); !errors.Is(err, ErrInsecurePolicyFile) {
			t.Errorf("mode %#o: err = %v, want ErrInsecurePolicyFile", mode, err)
		}
	}
	// A writable directory lets anyone replace the file.
	p := writePolicy(t, goodPolicy, 0o644)
	if err := os.Chmod(filepath.Dir(p), 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := loadSystemPolicy(p, me); !errors.Is(err, ErrInsecurePolicyFile) {
		t.Errorf("world-writable dir: err = %v", err)
	}
	// A symlink is not followed.
	target := writePolicy(t, goodPolicy, 0o644)
	link := filepath.Join(filepath.Dir(writePolicy(t, "", 0o644)), "link.toml")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if sp, err := loadSystemPolicy(link, me); err == nil {
		t.Errorf("symlinked policy loaded: %+v", sp)
	}
	// A directory in place of the file is an error, not "no policy".
	d := writePolicy(t, "", 0o644)
	os.Remove(d)
	os.Mkdir(d, 0o755)
	if sp, err := loadSystemPolicy(d, me); !errors.Is(err, ErrInsecurePolicyFile) {
		t.Errorf("directory loaded as policy: %+v, %v", sp, err)
	}
	// So is a FIFO (opened non-blocking, never read).
	fifo := filepath.Join(filepath.Dir(d), "fifo.toml")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if sp, err := loadSystemPolicy(fifo, me); !errors.Is(err, ErrInsecurePolicyFile) {
		t.Errorf("FIFO loaded as policy: %+v, %v", sp, err)
	}
}

func TestLoadSystemPolicyOwner(t *testing.T) {
	testenv.RequireRoot(t)
	p := writePolicy(t, goodPolicy, 0o644)
	if _, err := LoadSystemPolicy(p); err != nil {
		t.Fatalf("root-owned policy: %v", err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSystemPolicy(p); !errors.Is(err, ErrInsecurePolicyFile) {
		t.Errorf("policy owned by 65534: err = %v", err)
	}
	q := writePolicy(t, goodPolicy, 0o644)
	if err := os.Chown(filepath.Dir(q), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSystemPolicy(q); !errors.Is(err, ErrInsecurePolicyFile) {
		t.Errorf("directory owned by 65534: err = %v", err)
	}
}

// FuzzParseSystemPolicy: any document either fails with a sentinel error or yields only
// canonical patterns and valid ports.
func FuzzParseSystemPolicy(f *testing.F) {
	f.Add([]byte(goodPolicy))
	f.Add([]byte("deny_hosts = [\"*github.com\"]"))
	f.Add([]byte("[[host]]\nname = \"a.example\"\nports = [\"0\"]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sp, err := ParseSystemPolicy(data)
		if err != nil {
			if !errors.Is(err, ErrBadPolicy) && !errors.Is(err, ErrBadPattern) && !errors.Is(err, ErrBadPort) && !errors.Is(err, ErrBadProfile) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		var pats []Pattern
		for _, e := range append(append([]Entry(nil), sp.Allow...), sp.CodeHosts...) {
			pats = append(pats, e.Pattern)
			for _, p := range e.Ports {
				if p.Num == 0 || (p.Proto != TCP && p.Proto != UDP) {
					t.Fatalf("bad port %+v", p)
				}
			}
		}
		for _, p := range append(pats, sp.Deny...) {
			if q, err := ParsePattern(p.String()); err != nil || q != p {
				t.Fatalf("pattern %+v not canonical: %v", p, err)
			}
		}
	})
}

func TestParseConfig(t *testing.T) {
	lc, err := ParseConfig([]byte("profile = \"locked\"\ndeny_hosts = [\"github.com\"]\nallow_hosts = [\"x.example\"]\n[[host]]\nname = \"*.y.example\"\nports = [\"22\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if lc.Profile == nil || *lc.Profile != Locked || len(lc.Deny) != 1 || len(lc.Allow) != 2 || lc.Allow[1].String() != "*.y.example (22/tcp)" {
		t.Errorf("config = %+v", lc)
	}
	if _, err := ParseConfig([]byte("profile = \"wide-open\"")); !errors.Is(err, ErrBadProfile) {
		t.Errorf("bad profile err = %v", err)
	}
	if _, err := ParseConfig([]byte("allow = [\"x\"]")); !errors.Is(err, ErrBadPolicy) {
		t.Errorf("unknown key err = %v", err)
	}
	var zero ConfigFile
	if lc, err := zero.Parse(); err != nil || lc.Profile != nil || lc.Allow != nil {
		t.Errorf("zero config = %+v, %v", lc, err)
	}
}

// TestLayerFilesHostNames parses each layer's file as written and resolves it: a private
// public-suffix wildcard is IT's choice in the system policy only; ICANN suffixes and IP
// literals fail in every file and key.
func TestLayerFilesHostNames(t *testing.T) {
	sys, err := ParseSystemPolicy([]byte("allow_hosts = [\"*.github.io\"]\ncode_hosts = [\"github.com\", \"*.githubusercontent.com\"]\n[[host]]\nname = \"*.cloudfront.net\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	eff, err := Resolve(Inputs{System: sys})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"x.github.io", "raw.githubusercontent.com", "d111.cloudfront.net"} {
		if g, _, ok := eff.Check(n); !ok || g.Source.Layer != LayerSystem {
			t.Errorf("system policy wildcard does not allow %q: %v", n, g)
		}
	}

	for _, doc := range []string{"allow_hosts = [\"*.github.io\"]", "[[host]]\nname = \"*.herokuapp.com\"\nports = [\"443\"]"} {
		user, err := ParseConfig([]byte(doc))
		if err != nil {
			t.Fatalf("user config %q: %v", doc, err)
		}
		if _, err := Resolve(Inputs{User: user}); !errors.Is(err, ErrPublicSuffix) || !strings.Contains(err.Error(), "from user") {
			t.Errorf("user config %q: err = %v, want ErrPublicSuffix from user", doc, err)
		}
	}
	ws, err := ParseConfig([]byte("deny_hosts = [\"*.github.io\"]"))
	if err != nil {
		t.Fatal(err)
	}
	if eff, err := Resolve(Inputs{System: sys, Workspace: ws}); err != nil || eff.Allowed("x.github.io") {
		t.Errorf("workspace deny of *.github.io: err = %v\n%s", err, eff)
	}

	for _, key := range []string{"allow_hosts", "deny_hosts", "code_hosts"} {
		for _, v := range []string{"*.co.uk", "*.com.au", "*.com", "169.254.169.254", "2852039166", "0xa9.254.169.254"} {
			doc := key + " = [\"" + v + "\"]"
			if _, err := ParseSystemPolicy([]byte(doc)); !errors.Is(err, ErrBadPattern) || !strings.Contains(err.Error(), v) {
				t.Errorf("system policy %s: err = %v", doc, err)
			}
			if key == "code_hosts" {
				continue
			}
			if _, err := ParseConfig([]byte(doc)); !errors.Is(err, ErrBadPattern) || !strings.Contains(err.Error(), v) {
				t.Errorf("config %s: err = %v", doc, err)
			}
		}
	}
}

// The [images] table is decoded strictly and validated with the rest of the policy.
func TestSystemPolicyImages(t *testing.T) {
	d := "sha256:" + strings.Repeat("a", 64)
	sp, err := ParseSystemPolicy([]byte("[images]\nrequire_digests = true\non_demand_builds = false\nallowed_images = [\"127.0.0.1:5000\", \"" + d + "\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !sp.Images.RequireDigests || sp.Images.OnDemand() || len(sp.Images.AllowedImages) != 2 {
		t.Errorf("Images = %+v", sp.Images)
	}
	if sp, err := ParseSystemPolicy(nil); err != nil || !sp.Images.OnDemand() || sp.Images.RequireDigests {
		t.Errorf("empty policy: %+v, %v; want on-demand builds on, tags allowed", sp, err)
	}
	for _, doc := range []string{
		"[images]\nallowed_images = [\"sha256:abc\"]\n",
		"[images]\nrequire_digest = true\n",
		"[images]\non_demand_builds = \"yes\"\n",
	} {
		if _, err := ParseSystemPolicy([]byte(doc)); !errors.Is(err, ErrBadPolicy) {
			t.Errorf("ParseSystemPolicy(%q) = %v; want ErrBadPolicy", doc, err)
		}
	}
}
