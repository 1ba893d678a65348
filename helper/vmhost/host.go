package vmhost

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"runtime"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox"
)

// Host is what the daemon needs to run VMs, found by its host probe.
type Host struct {
	Backend sandbox.Backend // the VM backend the runners drive (nil: none on this host)
	VMM     string          // absolute path of its VMM binary, qemu-system-x86_64 ("": none)
	Accel   sandbox.Accel   // the probed accelerator
	Warning string          // non-empty under TCG
	Exe     string          // the helper executable (re-executed as spawner and runners)
	KVMGID  int             // gid of group "kvm" (-1: none); added to runners only under KVM
	// RequireLandlock is the system policy's require_landlock, passed to every runner
	// (runner.Config.RequireLandlock): a runner that cannot enforce the pinned Landlock ABI
	// refuses to start its VMM.
	RequireLandlock bool
}

// Resources is what one VM may use at most on this host; 0 means unknown (no cap).
type Resources struct {
	CPUs      int // runtime.NumCPU(): the CPUs this process may run on
	MemoryMiB int // physical memory in MiB (sysinfo(2) totalram × mem_unit)
}

// HostResources reads the host's CPU count and physical memory. A VM with more vCPUs than
// host CPUs boots very slowly under TCG (each vCPU is a thread; a 64-vCPU guest took
// minutes on 2 cores), and more memory than the host has ends in the OOM killer.
func HostResources() Resources {
	h := Resources{CPUs: runtime.NumCPU()}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		h.MemoryMiB = int(uint64(si.Totalram) * uint64(si.Unit) >> 20)
	}
	return h
}

// Sizes are a VM's vCPUs, memory in MiB and lifetime.
type Sizes struct {
	CPUs      int
	MemoryMiB int
	Timeout   time.Duration
}

// sizesFor applies the defaults, the sandbox.Spec limits and the host's limits to a's
// sizes. Sizes outside the sandbox limits wrap api.ErrBadRequest; sizes within them but
// above what the host has wrap api.ErrHostResources.
func sizesFor(a api.StartVMArgs, host Resources) (Sizes, error) {
	s := Sizes{CPUs: a.CPUs, MemoryMiB: a.MemoryMiB, Timeout: time.Duration(a.TimeoutSec) * time.Second}
	if s.CPUs == 0 {
		s.CPUs = sandbox.DefaultCPUs
		if host.CPUs > 0 {
			s.CPUs = min(s.CPUs, host.CPUs)
		}
	}
	if s.MemoryMiB == 0 {
		s.MemoryMiB = sandbox.DefaultMemoryMiB
	}
	if a.TimeoutSec == 0 {
		s.Timeout = sandbox.DefaultTimeout
	}
	var err error
	switch {
	case s.CPUs < 1 || s.CPUs > sandbox.MaxCPUs:
		err = fmt.Errorf("cpus %d not in 1..%d: %w", s.CPUs, sandbox.MaxCPUs, api.ErrBadRequest)
	case s.MemoryMiB < sandbox.MinMemoryMiB || s.MemoryMiB > sandbox.MaxMemoryMiB:
		err = fmt.Errorf("memory %d MiB not in %d..%d: %w", s.MemoryMiB, sandbox.MinMemoryMiB, sandbox.MaxMemoryMiB, api.ErrBadRequest)
	case a.TimeoutSec < 0 || s.Timeout > sandbox.DefaultTimeout:
		err = fmt.Errorf("timeout %d s not in 1..%d: %w", a.TimeoutSec, int(sandbox.DefaultTimeout/time.Second), api.ErrBadRequest)
	case host.CPUs > 0 && s.CPUs > host.CPUs:
		err = fmt.Errorf("cpus %d: the host has %d: %w", s.CPUs, host.CPUs, api.ErrHostResources)
	case host.MemoryMiB > 0 && s.MemoryMiB > host.MemoryMiB:
		err = fmt.Errorf("memory %d MiB: the host has %d MiB: %w", s.MemoryMiB, host.MemoryMiB, api.ErrHostResources)
	}
	return s, err
}

// parseClientKey checks that k is exactly one SSH public key in authorized_keys format
// without options and returns it normalized; errors wrap api.ErrBadRequest.
func parseClientKey(k string) (string, error) {
	pub, _, opts, rest, err := ssh.ParseAuthorizedKey([]byte(k))
	if err != nil {
		return "", fmt.Errorf("client key: %w: %w", api.ErrBadRequest, err)
	}
	if len(opts) > 0 || len(strings.TrimSpace(string(rest))) > 0 {
		return "", fmt.Errorf("client key: options or more than one key: %w", api.ErrBadRequest)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))), nil
}

// HostKey is a guest's per-session SSH host key.
type HostKey struct {
	PEM    []byte // the ed25519 private key as OpenSSH PEM, for the guest config
	Public string // the public key in authorized_keys format, for VMInfo
}

// NewHostKey generates a guest's per-session ed25519 SSH host key.
func NewHostKey() (HostKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return HostKey{}, fmt.Errorf("generate guest host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "brood guest host key")
	if err != nil {
		return HostKey{}, fmt.Errorf("marshal guest host key: %w", err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		return HostKey{}, fmt.Errorf("guest host public key: %w", err)
	}
	return HostKey{PEM: pem.EncodeToMemory(block), Public: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))}, nil
}
