package helper

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "helper.toml")
	os.WriteFile(p, []byte("allow_uids = [1000, 1001]\nrequire_landlock = true\nidle_seconds = 5\n"), 0o600)
	cfg, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.AllowUIDs) != 2 || !cfg.RequireLandlock || cfg.IdleSeconds != 5 || cfg.RuntimeDir != "/run/brood" {
		t.Errorf("cfg = %+v", cfg)
	}
	os.WriteFile(p, []byte("allow_everyone = true\n"), 0o600)
	if _, err := LoadConfig(p); !errors.Is(err, ErrConfig) {
		t.Errorf("unknown key: %v", err)
	}
	if _, err := LoadConfig(filepath.Join(dir, "missing.toml")); err == nil {
		t.Error("missing explicit config file accepted")
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(*Config)
		want string
	}{
		{"defaults", func(*Config) {}, ""},
		{"zero value", func(c *Config) { *c = Config{} }, "runtime_dir"},
		{"relative runtime dir", func(c *Config) { c.RuntimeDir = "run/brood" }, "runtime_dir"},
		{"root as state dir", func(c *Config) { c.StateDir = "/" }, "state_dir"},
		{"unclean path", func(c *Config) { c.StateDir = "/var/lib/../brood" }, "state_dir"},
		{"same dirs", func(c *Config) { c.StateDir = c.RuntimeDir }, "both"},
		{"no read timeout", func(c *Config) { c.ReadTimeoutSeconds = 0 }, "read_timeout_seconds"},
		{"negative idle", func(c *Config) { c.IdleSeconds = -1 }, "idle_seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.AllowGroup = ""
			tc.mut(&cfg)
			err := cfg.Validate(func(string) {})
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrConfig)) {
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
	// A group that does not exist admits nobody and is reported.
	cfg := DefaultConfig()
	cfg.AllowGroup = "no-such-group-brood-test"
	var warned string
	if err := cfg.Validate(func(m string) { warned = m }); err != nil || len(cfg.allowGIDs) != 0 || warned == "" {
		t.Errorf("missing group: err %v, gids %v, warning %q", err, cfg.allowGIDs, warned)
	}
	// An existing group resolves (root's group exists everywhere).
	cfg = DefaultConfig()
	cfg.AllowGroup = "root"
	if err := cfg.Validate(func(string) {}); err != nil || len(cfg.allowGIDs) != 1 || cfg.allowGIDs[0] != 0 {
		t.Errorf("group root: %v, %v", err, cfg.allowGIDs)
	}
}

func TestEnsureDir(t *testing.T) {
	base := t.TempDir()
	fresh := filepath.Join(base, "fresh")
	if err := EnsureDir(fresh); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Lstat(fresh); fi == nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Errorf("created %v", fi)
	}
	if err := EnsureDir(fresh); err != nil {
		t.Errorf("existing good dir: %v", err)
	}
	link := filepath.Join(base, "link")
	os.Symlink(fresh, link)
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o777)
	for _, p := range []string{link, file, open} {
		if err := EnsureDir(p); !errors.Is(err, ErrUnsafeDir) {
			t.Errorf("EnsureDir(%s) = %v, want unsafe", filepath.Base(p), err)
		}
	}
	fi, _ := os.Lstat(fresh)
	if err := checkDir(fresh, fi, uint32(os.Geteuid())+1); !errors.Is(err, ErrUnsafeDir) {
		t.Errorf("foreign owner accepted: %v", err)
	}
}
