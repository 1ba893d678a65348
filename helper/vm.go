package helper

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress"
	"brood.dev/brood/helper/vmhost"
)

// startVM prepares and boots the VM of session s for the owner, and returns its handle
// and the VM info for the client. onExit runs once the VM is gone (before waiters are
// released).
func (srv *Server) startVM(s *sessionRecord, a api.StartVMArgs, onExit func(api.VMExit)) (*vmhost.Handle, api.VMInfo, error) {
	// 1. The request against the host: refusals create nothing.
	if srv.vmHost == nil {
		return nil, api.VMInfo{}, fmt.Errorf("start VM: no VM backend on this host: %w", api.ErrUnavailable)
	}
	limits := vmhost.HostResources()
	sizes, _, err := vmhost.Check(a, *srv.vmHost, limits)
	if err != nil {
		return nil, api.VMInfo{}, err
	}
	// 1b. The owner's quota: vCPUs and memory of all their VMs together (limits.go).
	if err := srv.sessions.reserve(s, sizes, userQuotaFor(srv.cfg, limits)); err != nil {
		return nil, api.VMInfo{}, err
	}
	// 2. The boot artifacts, from the root-owned store.
	arts, err := openArtifacts(srv.cfg, a.Image)
	if err != nil {
		if errors.Is(err, ErrUnsafeArtifact) {
			srv.log.Error("refusing unsafe VM artifact", "session", s.ID, "err", err)
			err = fmt.Errorf("%w: %w", api.ErrUnavailable, err)
		}
		return nil, api.VMInfo{}, err
	}
	defer arts.Close()
	hostKey, err := vmhost.NewHostKey()
	if err != nil {
		return nil, api.VMInfo{}, err
	}
	// 3. The network, when asked for: policy first (refusals create nothing), then tap, nft
	// and DNS proxy. Without a profile the VM has no network device at all.
	eg, err := srv.startEgress(s, a)
	if err != nil {
		return nil, api.VMInfo{}, err
	}
	vm, info, err := srv.launchVM(s, arts, eg, vmhost.Input{Session: s.ID, UID: s.Owner, GID: s.gid, Args: a,
		Host: *srv.vmHost, Limits: limits, HostKey: hostKey, Net: vmNet(eg)}, onExit)
	if err != nil {
		if eg != nil {
			srv.egress.Stop(s.ID)
		}
		return nil, api.VMInfo{}, err
	}
	if eg != nil {
		info.SecretsCA = eg.SecretsCA
	}
	return vm, info, nil
}

// launchVM plans the VM of in (4: vmhost.PlanVM, pure) and applies the plan (5:
// vmhost.Start) with the session's share, the artifacts and the tap of eg. It returns
// the VM's handle and start_vm's answer.
func (srv *Server) launchVM(s *sessionRecord, arts *artifacts, eg *egress.Session, in vmhost.Input, onExit func(api.VMExit)) (*vmhost.Handle, api.VMInfo, error) {
	plan, err := vmhost.PlanVM(in)
	if err != nil {
		return nil, api.VMInfo{}, err
	}
	runDirs := filepath.Join(srv.cfg.RuntimeDir, vmhost.RunParent)
	if err := EnsureDir(runDirs); err != nil {
		return nil, api.VMInfo{}, err
	}
	l := vmhost.Launch{Log: srv.log, RunDirs: runDirs, Spawner: srv.spawner, Share: s.share,
		Kernel: arts.Kernel, Initrd: arts.Initrd, Image: arts.Image, OnExit: onExit}
	if eg != nil {
		l.Tap, l.Egress = eg.TapFile(), srv.egress
	}
	if cg := srv.cgroups; cg != nil { // the owner's cgroup (cgroup_linux.go)
		q := userQuotaFor(srv.cfg, in.Limits)
		l.Place = func(pid int) error {
			if err := cg.Place(pid, s.Owner, q); err != nil {
				return err
			}
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
			srv.log.Info("audit: runner placed", "session", s.ID, "uid", s.Owner, "runner", pid, "cgroup", strings.TrimSpace(string(b)))
			return nil
		}
		l.OnExit = func(e api.VMExit) {
			cg.Release(s.Owner)
			if onExit != nil {
				onExit(e)
			}
		}
	}
	vm, err := vmhost.Start(plan, l)
	if err != nil {
		if srv.cgroups != nil {
			srv.cgroups.Release(s.Owner)
		}
		return nil, api.VMInfo{}, err
	}
	if eg != nil {
		eg.CloseTapFile() // the runner (and the VMM) hold it now
	}
	runnerPid, vmmPid := vm.Pids()
	srv.log.Info("audit: VM started", "session", s.ID, "uid", s.Owner, "runner", runnerPid, "vmm", vmmPid,
		"accel", plan.Runner.Accel, "cpus", plan.Runner.CPUs, "memory_mib", plan.Runner.MemoryMiB, "timeout", plan.Timeout,
		"image", in.Args.Image, "kernel", arts.Release)
	info := plan.Info
	describeImage(&info, arts.Image) // vm_image.go
	return vm, info, nil
}

// vmNet is the part of eg the VM plan needs; nil without a network.
func vmNet(eg *egress.Session) *vmhost.Net {
	if eg == nil {
		return nil
	}
	return &vmhost.Net{Addrs: eg.Addrs, V6: eg.V6, Info: eg.Info}
}
