package netpolicy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiscover(t *testing.T) {
	root, home := t.TempDir(), t.TempDir()
	write := func(p, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "etc/apt/sources.list"), "# deb http://commented.example/x stable main\ndeb [arch=amd64 signed-by=/k.gpg] http://deb.mirror.example/debian bookworm main\ndeb-src https://src.mirror.example:8443/debian bookworm main\n")
	write(filepath.Join(root, "etc/apt/sources.list.d/a.sources"), "Types: deb\nURIs: http://sec.mirror.example/debian-security\nSuites: x\n\nTypes: deb\nEnabled: no\nURIs: https://disabled.example/\n")
	write(filepath.Join(root, "etc/apt/sources.list.d/b.list.disabled"), "deb https://ignored.example/ x main\n")
	write(filepath.Join(home, ".npmrc"), "@corp:registry=https://npm.corp.example/\n")
	write(filepath.Join(home, ".cargo/config.toml"), "[registries.corp]\nindex = \"sparse+https://crates.corp.example/index/\"\n[source.mirror]\nregistry = \"https://crates-mirror.corp.example/\"\n")
	env := map[string]string{"PIP_INDEX_URL": "https://pypi.corp.example/simple"}
	var ran []string
	d := Discoverer{
		Root: root, Home: home,
		Getenv: func(k string) string { return env[k] },
		Run: func(_ context.Context, name string, args ...string) ([]byte, error) {
			ran = append(ran, name+" "+strings.Join(args, " "))
			switch name {
			case "go":
				return []byte("https://goproxy.corp.example,https://fallback.corp.example|direct\nsum.corp.example+abcdef https://sumdb.corp.example:8443\n"), nil
			case "npm":
				return []byte("https://npm-main.corp.example/\n"), nil
			case "pip3":
				return []byte("global.extra-index-url='https://extra.corp.example/simple http://10.0.0.1/simple'\n"), nil
			}
			return nil, errors.New("not installed")
		},
	}
	found, notes := d.Discover(context.Background())
	got := map[string]Discovered{}
	for _, f := range found {
		got[f.Entry.String()] = f
	}
	want := map[string]string{
		"deb.mirror.example (80/tcp)":          "apt",
		"src.mirror.example (8443/tcp)":        "apt",
		"sec.mirror.example (80/tcp)":          "apt",
		"goproxy.corp.example (443/tcp)":       "go",
		"fallback.corp.example (443/tcp)":      "go",
		"sumdb.corp.example (8443/tcp)":        "go",
		"npm-main.corp.example (443/tcp)":      "npm",
		"npm.corp.example (443/tcp)":           "npm",
		"pypi.corp.example (443/tcp)":          "pip",
		"extra.corp.example (443/tcp)":         "pip",
		"crates.corp.example (443/tcp)":        "cargo",
		"crates-mirror.corp.example (443/tcp)": "cargo",
	}
	for e, tool := range want {
		if f, ok := got[e]; !ok || f.Tool != tool {
			t.Errorf("missing %s from %s; found %v", e, tool, found)
		}
	}
	if len(found) != len(want) {
		t.Errorf("found %d hosts, want %d: %v", len(found), len(want), found)
	}
	if f := got["deb.mirror.example (80/tcp)"]; f.UserControlled || !strings.HasSuffix(f.From, "etc/apt/sources.list") {
		t.Errorf("apt discovery = %+v", f)
	}
	if f := got["goproxy.corp.example (443/tcp)"]; !f.UserControlled || f.From != "go env GOPROXY" {
		t.Errorf("go discovery = %+v", f)
	}
	var noteIP bool
	for _, n := range notes {
		noteIP = noteIP || strings.Contains(n.What, "10.0.0.1")
	}
	if !noteIP {
		t.Errorf("IP-address index not noted: %v", notes)
	}
	// pip had a configured index, so its default was not asked for.
	for _, r := range ran {
		if strings.HasPrefix(r, "python3") {
			t.Errorf("asked python for pip's default although an index is configured")
		}
	}
}

func TestDiscoverSystemOnly(t *testing.T) {
	root, home := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/apt"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/apt/sources.list"), []byte("deb http://deb.mirror.example/debian bookworm main\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/npmrc"), []byte("registry=https://npm.corp.example/\n"), 0o644)
	os.WriteFile(filepath.Join(home, ".npmrc"), []byte("registry=https://user.example/\n"), 0o644)
	d := Discoverer{Root: root, Home: home, SystemOnly: true,
		Getenv: func(string) string { return "https://env.example/" },
		Run: func(context.Context, string, ...string) ([]byte, error) {
			t.Error("SystemOnly ran a tool")
			return nil, errors.New("no")
		}}
	found, _ := d.Discover(context.Background())
	var got []string
	for _, f := range found {
		if f.UserControlled {
			t.Errorf("user-controlled discovery %+v", f)
		}
		got = append(got, f.Entry.String())
	}
	if strings.Join(got, ",") != "deb.mirror.example (80/tcp),npm.corp.example (443/tcp)" {
		t.Errorf("found %v", got)
	}
}
