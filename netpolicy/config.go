package netpolicy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"golang.org/x/sys/unix"

	"brood.dev/brood/sandbox/ociref"
)

// SystemPolicyPath is where IT installs the system policy.
const SystemPolicyPath = "/etc/brood/policy.toml"

// maxPolicyBytes bounds a policy file read (1 MiB); longer files are malformed.
const maxPolicyBytes = 1 << 20

// HostFile is one `[[host]]` table of a policy or config file.
type HostFile struct {
	Name string `toml:"name"`
	// Ports: "443", "22/tcp", "53/udp"; empty means 443/tcp.
	Ports []string `toml:"ports"`
}

// ConfigFile is the egress part of a user config or workspace .brood.toml, as written:
//
//	profile     = "standard"
//	allow_hosts = ["mirror.example.org"]        # user only: a workspace may not add hosts
//	deny_hosts  = ["*.pastebin.example"]
//	[[host]]
//	name  = "git.example.org"
//	ports = ["443", "22"]
type ConfigFile struct {
	Profile    string     `toml:"profile"`
	AllowHosts []string   `toml:"allow_hosts"`
	DenyHosts  []string   `toml:"deny_hosts"`
	Hosts      []HostFile `toml:"host"`
}

// SystemPolicyFile is /etc/brood/policy.toml as written. Unknown keys are errors.
//
//	max_profile       = "standard"   # cap; default: no cap
//	default_profile   = "locked"     # an agent run's profile when no layer sets one; default: standard
//	forbid_allow_host = true         # refuse --allow-host and user allow_hosts
//	forbid_direct     = true         # refuse brood run --workspace-mode direct
//	forbid_raw_env    = true         # refuse agents' raw_env: every credential a placeholder
//	forbid_git_token  = true         # refuse brood run --git-token
//	forbid_login_write_back = true   # refuse brood run --write-back-logins
//	allow_ssh_agent   = false        # refuse brood run --ssh-agent (default: allowed)
//	allow_hosts       = ["llm-gw.corp.example"]
//	deny_hosts        = ["*.paste.example"]
//	code_hosts        = ["git.corp.example"]   # replaces the default code hosts of Standard
//	[[host]] ...                               # allow with ports
//	[images] ...                               # image rules: ociref.Policy
type SystemPolicyFile struct {
	MaxProfile      string `toml:"max_profile"`
	DefaultProfile  string `toml:"default_profile"`
	ForbidAllowHost bool   `toml:"forbid_allow_host"`
	ForbidDirect    bool   `toml:"forbid_direct"`
	ForbidRawEnv    bool   `toml:"forbid_raw_env"`
	ForbidGitToken  bool   `toml:"forbid_git_token"`
	// ForbidLoginWriteBack refuses --write-back-logins (refreshed OAuth tokens written
	// back to the developer's host login files).
	ForbidLoginWriteBack bool       `toml:"forbid_login_write_back"`
	AllowSSHAgent        *bool      `toml:"allow_ssh_agent"`
	AllowHosts           []string   `toml:"allow_hosts"`
	DenyHosts            []string   `toml:"deny_hosts"`
	CodeHosts            []string   `toml:"code_hosts"`
	Hosts                []HostFile `toml:"host"`
	// Images is the [images] table: which OCI images may be pulled and whether the
	// helper builds missing images on demand. The same file holds it because it is
	// IT's, like the egress rules; netpolicy only decodes and validates it.
	Images ociref.Policy `toml:"images"`
}

// SystemPolicy is the parsed system policy. The zero value caps nothing and adds nothing.
type SystemPolicy struct {
	MaxProfile *Profile
	// DefaultProfile, when non-nil, is the profile of a session whose layers set none
	// (instead of Standard); never looser than MaxProfile.
	DefaultProfile  *Profile
	ForbidAllowHost bool
	// ForbidDirect refuses sessions that mount the workspace itself (no snapshot, no
	// review); the helper enforces it at StartVM.
	ForbidDirect bool
	// ForbidRawEnv refuses agent configurations that keep credentials raw (raw_env),
	// and ForbidGitToken refuses --git-token; brood checks both before a run that would
	// use them (docs/secrets.md).
	ForbidRawEnv, ForbidGitToken bool
	// ForbidLoginWriteBack refuses --write-back-logins: brood checks it before the run,
	// and the helper then keeps no refreshed value for the session (docs/secrets.md).
	ForbidLoginWriteBack bool
	// ForbidSSHAgent refuses sessions that forward the developer's (filtered) SSH agent
	// (allow_ssh_agent = false); the helper enforces it at StartVM.
	ForbidSSHAgent bool
	Allow          []Entry
	Deny           []Pattern
	// CodeHosts, when non-nil, replaces DefaultCodeHosts for Standard.
	CodeHosts []Entry
	// Images is the [images] table, validated (ociref.Policy.Validate).
	Images ociref.Policy
	// Digest is "sha256:<hex>" of the file's bytes as parsed (set by LoadSystemPolicy,
	// from the same read; empty for a policy built in code).
	Digest string
}

// Parse validates the file's values.
func (f ConfigFile) Parse() (LayerConfig, error) {
	var lc LayerConfig
	if f.Profile != "" {
		p, err := ParseProfile(f.Profile)
		if err != nil {
			return LayerConfig{}, err
		}
		lc.Profile = &p
	}
	var err error
	if lc.Allow, err = parseEntries(f.AllowHosts, f.Hosts); err != nil {
		return LayerConfig{}, err
	}
	if lc.Deny, err = parsePatterns(f.DenyHosts); err != nil {
		return LayerConfig{}, err
	}
	return lc, nil
}

// Parse validates the file's values.
func (f SystemPolicyFile) Parse() (*SystemPolicy, error) {
	sp := &SystemPolicy{ForbidAllowHost: f.ForbidAllowHost, ForbidDirect: f.ForbidDirect, Images: f.Images,
		ForbidRawEnv: f.ForbidRawEnv, ForbidGitToken: f.ForbidGitToken, ForbidLoginWriteBack: f.ForbidLoginWriteBack,
		ForbidSSHAgent: f.AllowSSHAgent != nil && !*f.AllowSSHAgent}
	if err := f.Images.Validate(); err != nil {
		return nil, fmt.Errorf("system policy [images]: %v: %w", err, ErrBadPolicy)
	}
	if f.MaxProfile != "" {
		p, err := ParseProfile(f.MaxProfile)
		if err != nil {
			return nil, err
		}
		sp.MaxProfile = &p
	}
	if f.DefaultProfile != "" {
		p, err := ParseProfile(f.DefaultProfile)
		if err != nil {
			return nil, fmt.Errorf("default_profile: %w", err)
		}
		if sp.MaxProfile != nil && p > *sp.MaxProfile {
			return nil, fmt.Errorf("default_profile %s is looser than max_profile %s: %w", p, *sp.MaxProfile, ErrBadPolicy)
		}
		sp.DefaultProfile = &p
	}
	var err error
	if sp.Allow, err = parseEntries(f.AllowHosts, f.Hosts); err != nil {
		return nil, err
	}
	if sp.Deny, err = parsePatterns(f.DenyHosts); err != nil {
		return nil, err
	}
	if f.CodeHosts != nil {
		sp.CodeHosts = []Entry{}
		for _, n := range f.CodeHosts {
			e, err := ParseEntry(n, "443", "22")
			if err != nil {
				return nil, err
			}
			sp.CodeHosts = append(sp.CodeHosts, e)
		}
	}
	return sp, nil
}

func parseEntries(names []string, hosts []HostFile) ([]Entry, error) {
	var out []Entry
	for _, n := range names {
		e, err := ParseEntry(n)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	for _, h := range hosts {
		e, err := ParseEntry(h.Name, h.Ports...)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func parsePatterns(ss []string) ([]Pattern, error) {
	var out []Pattern
	for _, s := range ss {
		p, err := ParsePattern(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// ParseConfig decodes and validates a standalone egress config document (keys of
// ConfigFile at top level; unknown keys are errors). Errors wrap ErrBadPolicy or the
// parsing sentinels.
func ParseConfig(data []byte) (LayerConfig, error) {
	var f ConfigFile
	if err := decodeStrict(data, &f); err != nil {
		return LayerConfig{}, err
	}
	return f.Parse()
}

// ParseSystemPolicy decodes and validates the system policy document.
func ParseSystemPolicy(data []byte) (*SystemPolicy, error) {
	var f SystemPolicyFile
	if err := decodeStrict(data, &f); err != nil {
		return nil, err
	}
	return f.Parse()
}

func decodeStrict(data []byte, v any) error {
	d := toml.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) {
			return fmt.Errorf("decode policy: unknown key: %s: %w", strings.TrimSpace(sm.String()), ErrBadPolicy)
		}
		return fmt.Errorf("decode policy: %v: %w", err, ErrBadPolicy)
	}
	return nil
}

// LoadSystemPolicy reads the system policy at path (normally SystemPolicyPath) once, and
// sets its Digest from the bytes it parsed. A missing file returns (nil, nil): no system
// policy. The file must be a regular file (not followed
// through a symlink) owned by root and not writable by group or others, in a directory that
// is root-owned and not writable by group or others; otherwise ErrInsecurePolicyFile. A file
// that cannot be read or does not parse is an error — never a fallback to permissive.
func LoadSystemPolicy(path string) (*SystemPolicy, error) {
	return loadSystemPolicy(path, 0)
}

// loadSystemPolicy is LoadSystemPolicy with the required owner uid as a parameter (tests
// not running as root use their own uid).
func loadSystemPolicy(path string, owner uint32) (*SystemPolicy, error) {
	dir, err := os.OpenFile(filepath.Dir(path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open system policy directory: %w", err)
	}
	defer dir.Close()
	if err := checkOwner(dir, owner, unix.S_IFDIR); err != nil {
		return nil, fmt.Errorf("system policy directory %q: %w", dir.Name(), err)
	}
	fd, err := unix.Openat(int(dir.Fd()), filepath.Base(path), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open system policy %q: %w", path, &os.PathError{Op: "openat", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if err := checkOwner(f, owner, unix.S_IFREG); err != nil {
		return nil, fmt.Errorf("system policy %q: %w", path, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPolicyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read system policy %q: %w", path, err)
	}
	if len(data) > maxPolicyBytes {
		return nil, fmt.Errorf("read system policy %q: longer than %d bytes: %w", path, maxPolicyBytes, ErrBadPolicy)
	}
	sp, err := ParseSystemPolicy(data)
	if err != nil {
		return nil, fmt.Errorf("system policy %q: %w", path, err)
	}
	sum := sha256.Sum256(data)
	sp.Digest = "sha256:" + hex.EncodeToString(sum[:])
	return sp, nil
}

// checkOwner requires f to have file type typ (unix.S_IFREG or S_IFDIR), to be owned by
// uid and not writable by group or others.
func checkOwner(f *os.File, uid uint32, typ uint32) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	if mode := uint32(st.Mode); mode&unix.S_IFMT != typ { // st.Mode is uint16 on darwin
		return fmt.Errorf("file type %#o, want %#o: %w", mode&unix.S_IFMT, typ, ErrInsecurePolicyFile)
	}
	if st.Uid != uid {
		return fmt.Errorf("owned by uid %d, want %d: %w", st.Uid, uid, ErrInsecurePolicyFile)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("writable by group or others (mode %#o): %w", st.Mode&0o7777, ErrInsecurePolicyFile)
	}
	return nil
}

// ParseAllowHostFlag parses an --allow-host value: "NAME" (443/tcp) or "NAME:PORT[,PORT...]"
// with ports as in ParsePort, e.g. "git.example.org:443,22". An IP address in any form
// ("[::1]:443", "fe80::1%eth0", "169.254.169.254:80") fails with ErrIPLiteral: a value
// with more than one colon (never NAME:PORTS) is checked up to its first ',', so that an
// IPv6 address's colons are not taken for the port separator.
func ParseAllowHostFlag(s string) (Entry, error) {
	if strings.Count(s, ":") > 1 {
		head, _, _ := strings.Cut(s, ",")
		if form, ok := ipLiteral(head); ok {
			return Entry{}, fmt.Errorf("parse host %q: %s: %w", s, form, ErrIPLiteral)
		}
	}
	name, ports, found := strings.Cut(s, ":")
	if !found {
		return ParseEntry(name)
	}
	return ParseEntry(name, strings.Split(ports, ",")...)
}
