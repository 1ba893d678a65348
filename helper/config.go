package helper

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"github.com/pelletier/go-toml/v2"

	"brood.dev/brood/helper/egress"
	"brood.dev/brood/sandbox/store"
)

// DefaultConfigPath is the helper's configuration file, written by IT (root-owned).
const DefaultConfigPath = "/etc/brood/helper.toml"

// Config is the helper configuration (TOML at DefaultConfigPath). The zero value is not
// usable: start from DefaultConfig. An empty allow list (no group, no uids) lets only root
// in.
type Config struct {
	// RuntimeDir holds the socket; created by the helper, root-owned (default /run/brood).
	RuntimeDir string `toml:"runtime_dir"`
	// StateDir holds persistent state and is the root of the artifact store the helper
	// boots from and `broodd-helper image build` writes (default store.DefaultRoot).
	StateDir string `toml:"state_dir"`
	// AllowGroup names the group whose members may use the helper (default "brood"); a
	// group that does not exist admits nobody.
	AllowGroup string `toml:"allow_group"`
	// AllowGIDs lists further group ids whose members may use the helper.
	AllowGIDs []uint32 `toml:"allow_gids"`
	// AllowUIDs lists user ids that may use the helper.
	AllowUIDs []uint32 `toml:"allow_uids"`
	// RequireLandlock makes the helper refuse to start unless Landlock enforces its full
	// pinned ruleset (IT's policy); false allows a logged degraded mode.
	RequireLandlock bool `toml:"require_landlock"`
	// IdleSeconds: the helper exits after this many seconds with no connection and no
	// session (socket activation restarts it); 0 never exits.
	IdleSeconds int `toml:"idle_seconds"`
	// ReadTimeoutSeconds bounds the wait for each request frame, including the idle
	// time between requests on one connection (slow-loris protection).
	ReadTimeoutSeconds int `toml:"read_timeout_seconds"`
	// MaxConns bounds concurrent connections; further ones are closed at once.
	MaxConns int `toml:"max_conns"`
	// MaxConnsPerUser bounds the connections one uid may hold (below MaxConns, so that
	// max_conns - max_conns_per_user slots stay for other uids); further ones are closed
	// at once.
	MaxConnsPerUser int `toml:"max_conns_per_user"`
	// MaxWaitsPerUser bounds one uid's wait_vm calls in flight (each holds a connection
	// until its VM ends); further ones fail with the limit error.
	MaxWaitsPerUser int `toml:"max_waits_per_user"`
	// MaxSessionsPerUser bounds the sessions one uid may hold.
	MaxSessionsPerUser int `toml:"max_sessions_per_user"`
	// MaxVCPUsPerUser bounds the vCPUs of one uid's starting and running VMs together;
	// 0 derives it from the host (userQuotaFor: 2 × the host's CPUs).
	MaxVCPUsPerUser int `toml:"max_vcpus_per_user"`
	// MaxMemoryMiBPerUser bounds the guest memory (MiB) of one uid's starting and running
	// VMs together; 0 derives it from the host (userQuotaFor: 3/4 of its RAM).
	MaxMemoryMiBPerUser int `toml:"max_memory_mib_per_user"`
	// UnstartedTTLSeconds: a session whose VM was never started is destroyed this many
	// seconds after its creation (within a tenth more); 0 keeps such sessions.
	UnstartedTTLSeconds int `toml:"unstarted_session_ttl_seconds"`
	// KernelRelease pins the guest kernel under <state_dir>/kernels (e.g.
	// "6.1.0-57-amd64"); empty means the most recently fetched complete one.
	KernelRelease string `toml:"kernel_release"`
	// Initramfs pins the base initramfs file name under
	// <state_dir>/kernels/<release>/initramfs ("initramfs-<hex32>.cpio.gz"); empty means
	// the newest.
	Initramfs string `toml:"initramfs"`
	// Egress configures sessions' network egress (egress.go).
	Egress egress.Config `toml:"egress"`

	// allowGIDs is AllowGIDs plus the resolved AllowGroup (set by Validate).
	allowGIDs []uint32
	// selfCopy is the execute-only copy of the helper executable that the spawner, the
	// runners and the egress processes are executed from (set by prepareDirs, Run's step 4).
	selfCopy string
	// cgroupDir is the directory of the per-uid cgroups (userCgroups), set by Run before
	// confinement; empty without them.
	cgroupDir string
}

// DefaultConfig returns the built-in configuration.
func DefaultConfig() Config {
	return Config{
		RuntimeDir:          "/run/brood",
		StateDir:            store.DefaultRoot,
		AllowGroup:          "brood",
		IdleSeconds:         300,
		ReadTimeoutSeconds:  30,
		MaxConns:            256,
		MaxConnsPerUser:     64,
		MaxWaitsPerUser:     32,
		MaxSessionsPerUser:  16,
		UnstartedTTLSeconds: 600,
		Egress:              egress.DefaultConfig(),
	}
}

// LoadConfig reads the TOML file at path over DefaultConfig. A missing file at
// DefaultConfigPath yields the defaults; a missing file elsewhere is an error. Unknown
// keys are rejected.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && path == DefaultConfigPath {
		return cfg, nil
	}
	if err != nil {
		return cfg, fmt.Errorf("read helper config: %w", err)
	}
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return cfg, fmt.Errorf("parse helper config %q: %w: %w", path, ErrConfig, err)
	}
	return cfg, nil
}

// IdleTimeout is IdleSeconds as a duration (0: never).
func (c *Config) IdleTimeout() time.Duration { return time.Duration(c.IdleSeconds) * time.Second }

// UnstartedTTL is UnstartedTTLSeconds as a duration (0: never-started sessions stay).
func (c *Config) UnstartedTTL() time.Duration {
	return time.Duration(c.UnstartedTTLSeconds) * time.Second
}

// ReadTimeout is ReadTimeoutSeconds as a duration.
func (c *Config) ReadTimeout() time.Duration {
	return time.Duration(c.ReadTimeoutSeconds) * time.Second
}

// configChecks validate one aspect of a Config each (runc-style list of checks).
var configChecks = []func(*Config) error{
	func(c *Config) error { return absDir("runtime_dir", c.RuntimeDir) },
	func(c *Config) error { return absDir("state_dir", c.StateDir) },
	func(c *Config) error { return positive("read_timeout_seconds", c.ReadTimeoutSeconds) },
	func(c *Config) error { return positive("max_conns", c.MaxConns) },
	func(c *Config) error { return positive("max_conns_per_user", c.MaxConnsPerUser) },
	func(c *Config) error { return positive("max_waits_per_user", c.MaxWaitsPerUser) },
	func(c *Config) error {
		if c.MaxConnsPerUser >= c.MaxConns {
			return fmt.Errorf("max_conns_per_user %d must be below max_conns %d (slots kept for other users)", c.MaxConnsPerUser, c.MaxConns)
		}
		return nil
	},
	func(c *Config) error { return positive("max_sessions_per_user", c.MaxSessionsPerUser) },
	func(c *Config) error { return notNegative("max_vcpus_per_user", c.MaxVCPUsPerUser) },
	func(c *Config) error { return notNegative("max_memory_mib_per_user", c.MaxMemoryMiBPerUser) },
	func(c *Config) error { return notNegative("unstarted_session_ttl_seconds", c.UnstartedTTLSeconds) },
	func(c *Config) error {
		if c.IdleSeconds < 0 {
			return fmt.Errorf("idle_seconds %d is negative", c.IdleSeconds)
		}
		return nil
	},
	func(c *Config) error {
		if c.KernelRelease != "" && !store.ValidRelease(c.KernelRelease) {
			return fmt.Errorf("kernel_release %q is not a kernel release name", c.KernelRelease)
		}
		return nil
	},
	func(c *Config) error {
		if c.Initramfs != "" && !store.ValidInitramfsFile(c.Initramfs) {
			return fmt.Errorf("initramfs %q is not an initramfs-<hex32>.cpio.gz file name", c.Initramfs)
		}
		return nil
	},
	func(c *Config) error { return c.Egress.Validate() },
	func(c *Config) error {
		if c.RuntimeDir == c.StateDir {
			return fmt.Errorf("runtime_dir and state_dir are both %q", c.RuntimeDir)
		}
		return nil
	},
}

// Validate runs every check and resolves AllowGroup. It returns every problem found,
// each wrapping ErrConfig. warn receives non-fatal findings (a missing group).
func (c *Config) Validate(warn func(msg string)) error {
	var errs []error
	for _, check := range configChecks {
		if err := check(c); err != nil {
			errs = append(errs, fmt.Errorf("%w: %w", ErrConfig, err))
		}
	}
	c.allowGIDs = append([]uint32(nil), c.AllowGIDs...)
	if c.AllowGroup != "" {
		g, err := user.LookupGroup(c.AllowGroup)
		if err != nil {
			warn(fmt.Sprintf("group %q not found, its members cannot be admitted: %v", c.AllowGroup, err))
		} else if gid, err := strconv.ParseUint(g.Gid, 10, 32); err == nil {
			c.allowGIDs = append(c.allowGIDs, uint32(gid))
		}
	}
	return errors.Join(errs...)
}

func absDir(key, p string) error {
	if p == "" || !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
		return fmt.Errorf("%s %q is not a clean absolute path below /", key, p)
	}
	return nil
}

func positive(key string, v int) error {
	if v <= 0 {
		return fmt.Errorf("%s %d must be positive", key, v)
	}
	return nil
}

func notNegative(key string, v int) error {
	if v < 0 {
		return fmt.Errorf("%s %d is negative", key, v)
	}
	return nil
}
