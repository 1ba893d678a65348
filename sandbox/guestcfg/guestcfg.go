// Package guestcfg is the contract between the host side of brood and brood-guest (PID 1
// in the VM): the initramfs layout, the per-session configuration file, the kernel
// command line keys, and the session's SSH keys.
//
// It is a leaf package (standard library and x/crypto/ssh only) so the unprivileged
// frontend can build a session's configuration without linking guest or helper code.
//
// Privilege: none; pure values, linked into brood, broodd-helper and brood-guest.
package guestcfg

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Initramfs paths (relative to its root).
const (
	// InitPath is brood-guest, run by the kernel as PID 1.
	InitPath = "init"
	// ModulesLoadPath lists the module names brood-guest loads at boot, one per
	// line, in order. Modules in OptionalModules are loaded only when needed.
	ModulesLoadPath = "etc/brood/modules"
	// SessionPath is the session's Config as JSON, appended to the initramfs per
	// session. brood-guest reads it and deletes it before the agent runs.
	SessionPath = "etc/brood/session.json"
)

// OptionalModules are loaded by brood-guest only when the session needs them
// (virtio_net: only when Config.Net is set).
var OptionalModules = map[string]bool{"virtio_net": true}

// Kernel command line keys brood-guest reads from /proc/cmdline.
const (
	// CmdlineTime is the host's wall clock at boot, "SECONDS.NANOSECONDS" since the
	// Unix epoch; brood-guest sets the guest clock from it.
	CmdlineTime = "brood.time"
	// CmdlineDebug set to 1 makes brood-guest log each step to the console.
	CmdlineDebug = "brood.debug"
)

// Defaults of Config.
const (
	DefaultUser = "agent"
	DefaultUID  = 1000
	DefaultGID  = 1000
)

// Config is the per-session configuration brood-guest reads from SessionPath.
type Config struct {
	// HostKey is the guest SSH server's ed25519 private key, PEM (OpenSSH format).
	HostKey []byte `json:"host_key"`
	// AuthorizedKey is the one client public key the SSH server accepts, in
	// authorized_keys format ("ssh-ed25519 AAAA...").
	AuthorizedKey string `json:"authorized_key"`
	// User, UID and GID name the unprivileged account the agent runs as; zero values
	// mean DefaultUser, DefaultUID, DefaultGID. UID 0 is refused. Any uid works: the
	// guest names it in its /etc/passwd and mounts /home/User as a tmpfs it owns.
	User string `json:"user,omitempty"`
	UID  int    `json:"uid,omitempty"`
	GID  int    `json:"gid,omitempty"`
	// Net configures eth0; nil means the VM has no network.
	Net *Net `json:"net,omitempty"`
}

// Net is the guest's static configuration on eth0: IPv4, and IPv6 when Address6 is set
// (without it the guest has no global IPv6 address and no IPv6 route).
type Net struct {
	Address netip.Prefix `json:"address"`       // guest address and prefix, e.g. 10.0.0.2/30
	Gateway netip.Addr   `json:"gateway"`       // default route
	DNS     []netip.Addr `json:"dns,omitempty"` // written to /etc/resolv.conf, in order
	// Address6 and Gateway6 are the guest's IPv6 address (e.g. fd62:726f:6f64::2/126,
	// added without duplicate address detection) and its default route; both or neither.
	Address6 netip.Prefix `json:"address6,omitzero"`
	Gateway6 netip.Addr   `json:"gateway6,omitzero"`
}

// Normalize fills defaults and checks the Config.
func (c Config) Normalize() (Config, error) {
	if c.User == "" {
		c.User = DefaultUser
	}
	if c.UID == 0 {
		c.UID = DefaultUID
	}
	if c.GID == 0 {
		c.GID = DefaultGID
	}
	if c.UID < 0 || c.GID < 0 {
		return c, fmt.Errorf("guest config: uid %d gid %d: must be positive", c.UID, c.GID)
	}
	if len(c.HostKey) == 0 || c.AuthorizedKey == "" {
		return c, fmt.Errorf("guest config: host key and authorized key are required")
	}
	if c.Net != nil && (!c.Net.Address.IsValid() || !c.Net.Gateway.IsValid()) {
		return c, fmt.Errorf("guest config: net needs an address and a gateway")
	}
	if c.Net != nil && (c.Net.Address6.IsValid() || c.Net.Gateway6.IsValid()) &&
		(!c.Net.Address6.IsValid() || !c.Net.Address6.Addr().Is6() || c.Net.Address6.Addr().Is4In6() ||
			!c.Net.Gateway6.IsValid() || !c.Net.Gateway6.Is6() || c.Net.Gateway6.Is4In6()) {
		return c, fmt.Errorf("guest config: net needs both an IPv6 address and an IPv6 gateway, or neither")
	}
	return c, nil
}

// Marshal returns c as the JSON stored at SessionPath.
func (c Config) Marshal() ([]byte, error) { return json.Marshal(c) }

// Unmarshal parses and normalizes a Config; unknown fields are rejected.
func Unmarshal(b []byte) (Config, error) {
	var c Config
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return c, fmt.Errorf("parse guest config: %w", err)
	}
	return c.Normalize()
}

// Keys are a session's ephemeral SSH keys: the guest's host key (the host pins its
// public half) and the client key (the guest authorizes its public half).
type Keys struct {
	HostSigner   ssh.Signer
	HostKeyPEM   []byte // goes into Config.HostKey
	ClientSigner ssh.Signer
}

// NewKeys generates a session's two ed25519 key pairs.
func NewKeys() (*Keys, error) {
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(hostPriv, "brood guest host key")
	if err != nil {
		return nil, fmt.Errorf("marshal host key: %w", err)
	}
	hostSigner, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		return nil, fmt.Errorf("host signer: %w", err)
	}
	_, clientPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate client key: %w", err)
	}
	clientSigner, err := ssh.NewSignerFromKey(clientPriv)
	if err != nil {
		return nil, fmt.Errorf("client signer: %w", err)
	}
	return &Keys{HostSigner: hostSigner, HostKeyPEM: pem.EncodeToMemory(block), ClientSigner: clientSigner}, nil
}

// Config returns a guest Config authorizing the client key with the host key.
func (k *Keys) Config() Config {
	return Config{
		HostKey:       k.HostKeyPEM,
		AuthorizedKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.ClientSigner.PublicKey()))),
	}
}

// Ciphers is the SSH cipher preference for the virtio-serial channel: under TCG
// chacha20-poly1305 moves 2-3x the bytes of AES-GCM (measured with 32 MiB transfers on a
// 512 MiB microvm guest: no AES-NI is emulated, so AES-GCM runs in software).
var Ciphers = []string{"chacha20-poly1305@openssh.com", "aes128-gcm@openssh.com", "aes256-gcm@openssh.com"}
