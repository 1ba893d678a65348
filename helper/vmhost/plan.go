package vmhost

import (
	"fmt"
	"net/netip"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress"
	"brood.dev/brood/helper/runner"
	"brood.dev/brood/helper/spawner"
	"brood.dev/brood/sandbox"
	"brood.dev/brood/sandbox/guestcfg"
)

// Input is everything PlanVM decides from: plain values, no descriptors.
type Input struct {
	Session  string          // the session id
	UID, GID uint32          // the session owner's, who the runner and the guest user run as
	Args     api.StartVMArgs // the client's request: sizes, client key (image: opened by the caller)
	Host     Host            // the probed VM backend
	Limits   Resources       // the host's resources (HostResources)
	HostKey  HostKey         // the guest's SSH host key (NewHostKey)
	Net      *Net            // the session's network; nil: the VM gets no network device
}

// Net is the part of a session's egress (egress.Session) the VM plan needs.
type Net struct {
	Addrs egress.Addrs   // the link's addresses: the host side is the gateway and DNS
	V6    bool           // the guest gets its IPv6 address and route
	Info  api.EgressInfo // reported in VMInfo
}

// Plan is one VM as values: what the guest is told, what the runner is sent, as whom the
// spawner starts it, and what the client is answered.
type Plan struct {
	Guest   guestcfg.Config // normalized; written into the session initramfs
	Runner  runner.Config   // the runner's first message
	Spawn   spawner.Request // the runner's credentials
	Timeout time.Duration   // the VM's lifetime (the runner enforces it, the daemon backs it up)
	Info    api.VMInfo      // start_vm's answer
}

// Check is PlanVM's validation of the request against the host, run alone before anything
// is created (refusals create nothing): a VM backend must exist (api.ErrUnavailable), the
// client key must be one plain SSH public key and the sizes within the sandbox's and the
// host's limits (api.ErrBadRequest, api.ErrHostResources).
func Check(a api.StartVMArgs, h Host, limits Resources) (Sizes, string, error) {
	if h.Backend == nil || h.VMM == "" {
		return Sizes{}, "", fmt.Errorf("start VM: no VM backend on this host: %w", api.ErrUnavailable)
	}
	key, err := parseClientKey(a.ClientKey)
	if err != nil {
		return Sizes{}, "", err
	}
	sizes, err := sizesFor(a, limits)
	if err != nil {
		return Sizes{}, "", err
	}
	return sizes, key, nil
}

// PlanVM builds the plan of in's VM. It is pure: no descriptor, no file, no process. Its
// errors are Check's, an owner uid or gid 0 (api.ErrPermissionDenied: a VM never runs as
// root, which the spawner refuses too) and an invalid guest config.
func PlanVM(in Input) (Plan, error) {
	sizes, key, err := Check(in.Args, in.Host, in.Limits)
	if err != nil {
		return Plan{}, err
	}
	if in.UID == 0 || in.GID == 0 {
		return Plan{}, fmt.Errorf("VM of session %s as uid %d gid %d: root is refused: %w", in.Session, in.UID, in.GID, api.ErrPermissionDenied)
	}
	g := guestcfg.Config{HostKey: in.HostKey.PEM, AuthorizedKey: key, UID: int(in.UID), GID: int(in.GID), Net: guestNet(in.Net)}
	if g, err = g.Normalize(); err != nil {
		return Plan{}, fmt.Errorf("guest config of session %s: %w", in.Session, err)
	}
	p := Plan{
		Guest: g,
		Runner: runner.Config{Session: in.Session, Backend: in.Host.Backend.Name(), VMM: in.Host.VMM, Accel: in.Host.Accel,
			CPUs: sizes.CPUs, MemoryMiB: sizes.MemoryMiB, TimeoutSec: int(sizes.Timeout / time.Second), Tap: in.Net != nil,
			RequireLandlock: in.Host.RequireLandlock},
		Spawn:   spawner.Request{UID: in.UID, GID: in.GID, Groups: []uint32{}},
		Timeout: sizes.Timeout,
		Info:    api.VMInfo{HostKey: in.HostKey.Public, Accel: in.Host.Accel, Warning: in.Host.Warning, Backend: in.Host.Backend.Name()},
	}
	// The kvm group only where the runner opens /dev/kvm.
	if in.Host.Accel == sandbox.AccelKVM && in.Host.KVMGID >= 0 {
		p.Spawn.Groups = append(p.Spawn.Groups, uint32(in.Host.KVMGID))
	}
	if in.Net != nil {
		info := in.Net.Info
		p.Info.Egress = &info
	}
	return p, nil
}

// guestNet is the guest's network configuration on n's link: the host side of the /30
// (and /126 with V6) is the gateway and the only DNS server; nil without a network.
func guestNet(n *Net) *guestcfg.Net {
	if n == nil {
		return nil
	}
	a := n.Addrs
	g := &guestcfg.Net{Address: netip.PrefixFrom(a.Guest4, 30), Gateway: a.Host4, DNS: []netip.Addr{a.Host4}}
	if n.V6 {
		g.Address6, g.Gateway6 = netip.PrefixFrom(a.Guest6, 126), a.Host6
		g.DNS = append(g.DNS, a.Host6)
	}
	return g
}
