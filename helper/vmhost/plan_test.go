package vmhost

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress"
	"brood.dev/brood/sandbox"
)

// nameBackend is a sandbox.Backend that only has a name: PlanVM never starts anything.
type nameBackend string

func (b nameBackend) Name() string { return string(b) }
func (nameBackend) Probe(context.Context) (sandbox.Capabilities, error) {
	return sandbox.Capabilities{}, nil
}
func (nameBackend) Start(context.Context, sandbox.Spec) (sandbox.VM, error) {
	return nil, errors.New("nameBackend starts nothing")
}

const testClientKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBcjnV6TRq0Wd4bS3BT9fxoRVa0CxpWIy5mQwGDC5vIm"

// testNet is a session network on the pool's first slot.
func testNet(v6 bool) *Net {
	return &Net{
		Addrs: egress.Addrs{
			Host4: netip.MustParseAddr("10.213.0.1"), Guest4: netip.MustParseAddr("10.213.0.2"),
			Host6: netip.MustParseAddr("fd62:726f:6f64::1"), Guest6: netip.MustParseAddr("fd62:726f:6f64::2"),
			Net4: netip.MustParsePrefix("10.213.0.0/30"), Net6: netip.MustParsePrefix("fd62:726f:6f64::/126"),
		},
		V6:   v6,
		Info: api.EgressInfo{Profile: "locked", Tap: "brd0000beef", Digest: "sha256:00"},
	}
}

// TestPlanVM: the plan of one VM as a value, from every kind of input: refusals (no
// backend, bad keys, sizes beyond the sandbox's or the host's limits, a uid the guest
// cannot have), defaults, explicit sizes, the kvm group only under KVM, and the guest's
// network with and without IPv6.
func TestPlanVM(t *testing.T) {
	kvmHost := Host{Backend: nameBackend("qemu"), VMM: "/run/brood/vmm/bin/qemu-system-x86_64", Accel: sandbox.AccelKVM, KVMGID: 108}
	tcgHost := Host{Backend: nameBackend("qemu"), VMM: "/usr/bin/qemu-system-x86_64", Accel: sandbox.AccelTCG, Warning: "TCG is slow", KVMGID: 108}
	big := Resources{CPUs: 8, MemoryMiB: 16384}
	base := func(mut func(*Input)) Input {
		in := Input{Session: "0000beef", UID: 4242, GID: 4343, Args: api.StartVMArgs{ID: "0000beef", ClientKey: testClientKey + " me@laptop\n"},
			Host: tcgHost, Limits: big, HostKey: HostKey{PEM: []byte("-----BEGIN OPENSSH PRIVATE KEY-----\n"), Public: "ssh-ed25519 AAAAhost"}}
		if mut != nil {
			mut(&in)
		}
		return in
	}
	for _, tc := range []struct {
		name  string
		in    Input
		err   error // nil: the plan passes check
		check func(t *testing.T, p Plan)
	}{
		{"no backend", base(func(in *Input) { in.Host.Backend = nil }), api.ErrUnavailable, nil},
		{"no VMM binary", base(func(in *Input) { in.Host.VMM = "" }), api.ErrUnavailable, nil},
		{"no client key", base(func(in *Input) { in.Args.ClientKey = "" }), api.ErrBadRequest, nil},
		{"client key with options", base(func(in *Input) { in.Args.ClientKey = `command="sh" ` + testClientKey }), api.ErrBadRequest, nil},
		{"two client keys", base(func(in *Input) { in.Args.ClientKey = testClientKey + "\n" + testClientKey }), api.ErrBadRequest, nil},
		{"too many vCPUs", base(func(in *Input) { in.Args.CPUs = sandbox.MaxCPUs + 1 }), api.ErrBadRequest, nil},
		{"too little memory", base(func(in *Input) { in.Args.MemoryMiB = sandbox.MinMemoryMiB - 1 }), api.ErrBadRequest, nil},
		{"negative timeout", base(func(in *Input) { in.Args.TimeoutSec = -1 }), api.ErrBadRequest, nil},
		{"timeout beyond the maximum", base(func(in *Input) { in.Args.TimeoutSec = int(sandbox.DefaultTimeout/time.Second) + 1 }), api.ErrBadRequest, nil},
		{"another backend", base(func(in *Input) { in.Host.Backend, in.Host.VMM = nameBackend("krun"), "/usr/bin/krun" }), nil, func(t *testing.T, p Plan) {
			if p.Runner.Backend != "krun" || p.Runner.VMM != "/usr/bin/krun" || p.Info.Backend != "krun" {
				t.Errorf("runner %+v info %+v: the backend's name and binary reach the runner and the answer", p.Runner, p.Info)
			}
		}},
		{"more vCPUs than the host", base(func(in *Input) { in.Args.CPUs = 9 }), api.ErrHostResources, nil},
		{"more memory than the host", base(func(in *Input) { in.Args.MemoryMiB = 16385 }), api.ErrHostResources, nil},
		{"root owner", base(func(in *Input) { in.UID = 0 }), api.ErrPermissionDenied, nil},
		{"root group", base(func(in *Input) { in.GID = 0 }), api.ErrPermissionDenied, nil},
		{"defaults", base(nil), nil, func(t *testing.T, p Plan) {
			r := p.Runner
			if r.Session != "0000beef" || r.Backend != "qemu" || r.VMM != tcgHost.VMM || r.Accel != sandbox.AccelTCG ||
				r.CPUs != sandbox.DefaultCPUs || r.MemoryMiB != sandbox.DefaultMemoryMiB ||
				r.TimeoutSec != int(sandbox.DefaultTimeout/time.Second) || r.Tap || r.RequireLandlock {
				t.Errorf("runner config %+v", r)
			}
			if p.Timeout != sandbox.DefaultTimeout {
				t.Errorf("timeout %v", p.Timeout)
			}
			if p.Spawn.UID != 4242 || p.Spawn.GID != 4343 || len(p.Spawn.Groups) != 0 || p.Spawn.Groups == nil {
				t.Errorf("spawn request %+v (TCG: no kvm group, an empty list)", p.Spawn)
			}
			g := p.Guest
			if g.UID != 4242 || g.GID != 4343 || g.AuthorizedKey != testClientKey || string(g.HostKey) != string(base(nil).HostKey.PEM) || g.Net != nil {
				t.Errorf("guest config %+v", g)
			}
			if i := p.Info; i.HostKey != "ssh-ed25519 AAAAhost" || i.Accel != sandbox.AccelTCG || i.Warning != "TCG is slow" || i.Backend != "qemu" || i.Egress != nil {
				t.Errorf("info %+v", i)
			}
		}},
		{"require_landlock reaches the runner", base(func(in *Input) { in.Host.RequireLandlock = true }), nil, func(t *testing.T, p Plan) {
			if !p.Runner.RequireLandlock {
				t.Errorf("runner config %+v: the system policy's require_landlock is the runner's too", p.Runner)
			}
		}},
		{"defaults on a 1-CPU host", base(func(in *Input) { in.Limits = Resources{CPUs: 1} }), nil, func(t *testing.T, p Plan) {
			if p.Runner.CPUs != 1 {
				t.Errorf("vCPUs %d on a 1-CPU host", p.Runner.CPUs)
			}
		}},
		{"explicit sizes", base(func(in *Input) { in.Args.CPUs, in.Args.MemoryMiB, in.Args.TimeoutSec = 8, 16384, 90 }), nil, func(t *testing.T, p Plan) {
			if p.Runner.CPUs != 8 || p.Runner.MemoryMiB != 16384 || p.Runner.TimeoutSec != 90 || p.Timeout != 90*time.Second {
				t.Errorf("runner %+v timeout %v", p.Runner, p.Timeout)
			}
		}},
		{"KVM adds the kvm group", base(func(in *Input) { in.Host = kvmHost }), nil, func(t *testing.T, p Plan) {
			if !slices.Equal(p.Spawn.Groups, []uint32{108}) || p.Runner.Accel != sandbox.AccelKVM || p.Info.Warning != "" {
				t.Errorf("spawn %+v runner %+v info %+v", p.Spawn, p.Runner, p.Info)
			}
		}},
		{"KVM without a kvm group", base(func(in *Input) { in.Host = kvmHost; in.Host.KVMGID = -1 }), nil, func(t *testing.T, p Plan) {
			if len(p.Spawn.Groups) != 0 {
				t.Errorf("groups %v without a kvm group", p.Spawn.Groups)
			}
		}},
		{"network, IPv4 only", base(func(in *Input) { in.Net = testNet(false) }), nil, func(t *testing.T, p Plan) {
			n := p.Guest.Net
			if n == nil || n.Address.String() != "10.213.0.2/30" || n.Gateway.String() != "10.213.0.1" ||
				!slices.Equal(n.DNS, []netip.Addr{netip.MustParseAddr("10.213.0.1")}) || n.Address6.IsValid() || n.Gateway6.IsValid() {
				t.Errorf("guest net %+v", n)
			}
			if !p.Runner.Tap || p.Info.Egress == nil || p.Info.Egress.Tap != "brd0000beef" || p.Info.Egress.Digest != "sha256:00" {
				t.Errorf("runner tap %v, egress info %+v", p.Runner.Tap, p.Info.Egress)
			}
		}},
		{"network with IPv6", base(func(in *Input) { in.Net = testNet(true) }), nil, func(t *testing.T, p Plan) {
			n := p.Guest.Net
			if n == nil || n.Address6.String() != "fd62:726f:6f64::2/126" || n.Gateway6.String() != "fd62:726f:6f64::1" ||
				len(n.DNS) != 2 || n.DNS[1].String() != "fd62:726f:6f64::1" {
				t.Errorf("guest net %+v", n)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanVM(tc.in)
			switch {
			case tc.err != nil && !errors.Is(err, tc.err):
				t.Fatalf("PlanVM = %v, want %v", err, tc.err)
			case tc.err == nil && err != nil:
				t.Fatalf("PlanVM: %v", err)
			}
			if tc.check != nil {
				tc.check(t, p)
			}
			// Check, run alone before anything is created, refuses what PlanVM refuses
			// for the request and the host (the owner is the daemon's, not the request's).
			if _, _, cerr := Check(tc.in.Args, tc.in.Host, tc.in.Limits); (cerr == nil) != (err == nil) && !errors.Is(err, api.ErrPermissionDenied) {
				t.Errorf("Check = %v, PlanVM = %v", cerr, err)
			}
		})
	}
}
