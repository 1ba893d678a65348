package qemu

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/sandbox"
)

func baseSpec() sandbox.Spec {
	s := sandbox.NewSpec("/k/vmlinux", "/k/initrd.img", "/run/s/ssh.sock", "")
	s.CPUs, s.MemoryMiB = 1, 512
	return s
}

func TestArgs(t *testing.T) {
	now := time.Unix(1700000000, 5)
	tap, err := os.Open(os.DevNull) // stands in for the tap: Args only checks it is set
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	common := []string{"-M", "microvm"}
	tests := []struct {
		name    string
		spec    func(*sandbox.Spec)
		boot    Boot
		want    [][]string // argument runs that must appear
		notWant []string   // options that must not appear
	}{
		{
			name: "tcg minimal: no disk, no share, no network",
			boot: Boot{Accel: sandbox.AccelTCG, TSCkHz: 2596150, Now: now},
			want: [][]string{
				common, {"-accel", "tcg", "-cpu", "max"}, {"-smp", "1"}, {"-m", "512"},
				{"-nodefaults", "-no-user-config", "-nographic", "-no-reboot"},
				{"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"},
				{"-kernel", "/k/vmlinux", "-initrd", "/k/initrd.img"},
				{"-append", "console=ttyS0 reboot=t panic=-1 tsc_early_khz=2596150 tsc=reliable brood.time=1700000000.000000005"},
				{"-device", "virtio-rng-device,rng=rng0"},
				{"-chardev", "socket,id=ssh0,path=/run/s/ssh.sock,server=on,wait=off"},
				{"-device", "virtserialport,bus=vser0.0,chardev=ssh0,name=brood.ssh"},
			},
			notWant: []string{"-netdev", "-drive", "-fsdev"},
		},
		{
			name: "kvm with rootfs, share and user cmdline",
			spec: func(s *sandbox.Spec) {
				s.RootfsImage, s.ShareDir, s.CPUs = "/img/test.ext4", "/snap/S", 2
				s.Cmdline = []string{"brood.x=1"}
			},
			boot: Boot{Accel: sandbox.AccelKVM, TSCkHz: 2596150},
			want: [][]string{
				{"-accel", "kvm", "-cpu", "host"}, {"-smp", "2"},
				{"-append", "console=ttyS0 reboot=t panic=-1 brood.x=1"},
				{"-drive", "file=/img/test.ext4,if=none,id=root,format=raw,readonly=on", "-device", "virtio-blk-device,drive=root"},
				{"-fsdev", "local,id=fs0,path=/snap/S,security_model=none", "-device", "virtio-9p-device,fsdev=fs0,mount_tag=workspace"},
			},
			notWant: []string{"-netdev"},
		},
		{
			name: "tap as fd 3",
			spec: func(s *sandbox.Spec) { s.Tap = tap; s.MAC = "52:54:00:00:00:09" },
			boot: Boot{Accel: sandbox.AccelTCG},
			want: [][]string{
				{"-append", "console=ttyS0 reboot=t panic=-1"},
				{"-netdev", "tap,id=net0,fd=3", "-device", "virtio-net-device,netdev=net0,mac=52:54:00:00:00:09"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := baseSpec()
			if tt.spec != nil {
				tt.spec(&s)
			}
			got := Args(s, tt.boot)
			for _, run := range tt.want {
				if !containsRun(got, run) {
					t.Errorf("Args lacks %q\nargs: %q", run, got)
				}
			}
			for _, o := range tt.notWant {
				if slices.Contains(got, o) {
					t.Errorf("Args has %q\nargs: %q", o, got)
				}
			}
		})
	}
}

// containsRun reports whether run appears as consecutive elements of args.
func containsRun(args, run []string) bool {
	for i := 0; i+len(run) <= len(args); i++ {
		if slices.Equal(args[i:i+len(run)], run) {
			return true
		}
	}
	return false
}

func TestChooseAccel(t *testing.T) {
	tests := []struct {
		name   string
		host   KVMHost
		want   sandbox.Accel
		reason string
	}{
		{"no /dev/kvm", KVMHost{OpenErr: os.ErrNotExist}, sandbox.AccelTCG, "open /dev/kvm"},
		{"kvm_pvm only (this lab)", KVMHost{Modules: map[string]bool{"kvm_pvm": true}, APIVersion: 12}, sandbox.AccelTCG, "kvm_pvm"},
		{"kvm_intel", KVMHost{Modules: map[string]bool{"kvm_intel": true}, APIVersion: 12}, sandbox.AccelKVM, "kvm_intel"},
		{"kvm_amd next to kvm_pvm", KVMHost{Modules: map[string]bool{"kvm_amd": true, "kvm_pvm": true}, APIVersion: 12}, sandbox.AccelKVM, "kvm_amd"},
		{"create vm fails", KVMHost{Modules: map[string]bool{"kvm_intel": true}, APIVersion: 12, CreateVMErr: errors.New("EBUSY")}, sandbox.AccelTCG, "KVM_CREATE_VM"},
		{"wrong api", KVMHost{Modules: map[string]bool{"kvm_intel": true}, APIVersion: 11}, sandbox.AccelTCG, "API version 11"},
		{"no vendor module", KVMHost{Modules: map[string]bool{}, APIVersion: 12}, sandbox.AccelTCG, "neither"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := ChooseAccel(tt.host)
			if got != tt.want || !strings.Contains(reason, tt.reason) {
				t.Errorf("ChooseAccel = %q, %q; want %q with %q", got, reason, tt.want, tt.reason)
			}
		})
	}
}

func TestTSCkHz(t *testing.T) {
	got, err := TSCkHz([]byte("processor\t: 0\nmodel name\t: X\ncpu MHz\t\t: 2596.150\ncache size\t: 1 KB\n"))
	if err != nil || got != 2596150 {
		t.Errorf("TSCkHz = %d, %v; want 2596150", got, err)
	}
	if _, err := TSCkHz([]byte("processor\t: 0\n")); !errors.Is(err, ErrNoTSC) {
		t.Errorf("TSCkHz without cpu MHz: err = %v, want ErrNoTSC", err)
	}
}

func TestProbeOnThisHost(t *testing.T) {
	b := &Backend{}
	c, err := b.Probe(t.Context())
	if errors.Is(err, sandbox.ErrUnavailable) {
		t.Skipf("qemu not installed: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if c.Reason == "" || (c.Accel == sandbox.AccelTCG) != (c.Warning != "") {
		t.Errorf("Probe = %+v: want a reason, and a warning exactly under TCG", c)
	}
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil && c.Accel != sandbox.AccelTCG {
		t.Errorf("Probe chose %q on a kvm_pvm host", c.Accel)
	}
	t.Logf("probe: %+v", c)
}
