package vmtest

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/sandbox"
	"brood.dev/brood/sandbox/assets"
	"brood.dev/brood/sandbox/guestcfg"
	"brood.dev/brood/sandbox/initramfs"
)

// BenchmarkVMSession boots the test image, runs one command over SSH, ends the session
// and waits for QEMU to exit. It reports QEMU start to first command done
// (first-cmd-ms) and QEMU start to QEMU exit (vm-ms), median over b.N boots.
// Run: go test -run '^$' -bench VM -benchtime 3x ./sandbox/vmtest
func BenchmarkVMSession(b *testing.B) {
	a := Get(b)
	var first, whole []time.Duration
	for b.Loop() {
		r := bootB(b, a, "", 2*time.Minute)
		ctx, cancel := firstCommand(b, r)
		first = append(first, time.Since(r.start))
		r.client.Close()
		if err := r.vm.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		whole = append(whole, time.Since(r.start))
	}
	b.ReportMetric(ms(median(first)), "first-cmd-ms")
	b.ReportMetric(ms(minimum(first)), "first-cmd-min-ms")
	b.ReportMetric(ms(median(whole)), "vm-ms")
	b.ReportMetric(ms(minimum(whole)), "vm-min-ms")
}

// BenchmarkVMBareBoot is the baseline: the same kernel and initramfs with bareInit as
// /init; bare-ms is QEMU start to bareInit's console line (userspace reached).
func BenchmarkVMBareBoot(b *testing.B) {
	a := Get(b)
	var bare []time.Duration
	for b.Loop() {
		since, _ := bareBootTimes(b, a)
		bare = append(bare, since)
	}
	b.ReportMetric(ms(median(bare)), "bare-ms")
	b.ReportMetric(ms(minimum(bare)), "bare-min-ms")
}

// firstCommand dials r's guest (within 90 s) and runs "true" in a session; it returns
// the context the caller waits for the VM's exit in, and its cancel.
func firstCommand(b *testing.B, r *vmRun) (context.Context, context.CancelFunc) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	if err := r.dialCtx(ctx); err != nil {
		cancel()
		b.Fatalf("dial: %v\n%s", err, r.vm.ConsoleLog())
	}
	s, err := r.client.NewSession()
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	if err := s.Run("true"); err != nil {
		cancel()
		b.Fatal(err)
	}
	return ctx, cancel
}

// bareBootTimes boots bootBare and returns the time and the CPU time from QEMU's start
// to bareInit's console line, once the VM has exited.
func bareBootTimes(b *testing.B, a *assets.Set) (since, cpu time.Duration) {
	b.Helper()
	r := bootBare(b, a, time.Minute)
	since, cpu, ok := waitConsole(r, bareInitMarker, time.Minute)
	if err := r.vm.Wait(context.Background()); err != nil || !ok {
		b.Fatalf("bare boot: init marker seen %v, exit %v\n%s", ok, err, r.vm.ConsoleLog())
	}
	return since, cpu
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func minimum(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[0]
}

// BenchmarkVMBootRatio interleaves, b.N times each, three boots of the same kernel and
// base initramfs, so that all see the same machine load:
//
//   - bare: the kernel boots to userspace and runs bareInit (bare-ms, bare-min-ms: QEMU
//     start to bareInit's line on the console, so the power-off is not counted);
//   - panic: rdinit=/nonexistent, the kernel panics before it frees its init memory
//     and runs any init (panic-ms, panic-min-ms), the baseline used before 2026-12-01;
//   - session: brood-guest with a workspace share up to the first SSH command done
//     (first-cmd-ms, first-cmd-min-ms), as BenchmarkVMSession.
//
// It reports the ratios of session to bare (ratio-med, ratio-min; brood's goal is
// <= 1.3) and to panic (ratio-panic-med, ratio-panic-min). On a busy host wall-clock TCG
// timings swing by 2x, so it also reports the CPU time QEMU used (user+system, all
// threads, 10 ms ticks) for the bare and session spans (bare-cpu-ms, first-cmd-cpu-ms,
// medians) and their ratio (ratio-cpu). The VMs have a session's default size
// (sandbox.DefaultCPUs, DefaultMemoryMiB) unless BROOD_VMTEST_CPUS /
// BROOD_VMTEST_MEMORY_MIB say otherwise. sandbox/vmtest/bench.sh prints it all.
func BenchmarkVMBootRatio(b *testing.B) {
	a := Get(b)
	if os.Getenv("BROOD_VMTEST_CPUS") == "" {
		b.Setenv("BROOD_VMTEST_CPUS", strconv.Itoa(sandbox.DefaultCPUs))
	}
	if os.Getenv("BROOD_VMTEST_MEMORY_MIB") == "" {
		b.Setenv("BROOD_VMTEST_MEMORY_MIB", strconv.Itoa(sandbox.DefaultMemoryMiB))
	}
	share := b.TempDir()
	var bare, panics, first, bareCPU, firstCPU []time.Duration
	for b.Loop() {
		since, cpu := bareBootTimes(b, a)
		bare = append(bare, since)
		bareCPU = append(bareCPU, cpu)

		r := bootB(b, a, "", time.Minute, "rdinit=/nonexistent")
		if err := r.vm.Wait(context.Background()); !errors.Is(err, sandbox.ErrVMFailed) {
			b.Fatalf("panic boot: %v", err)
		}
		panics = append(panics, time.Since(r.start))

		r = bootB(b, a, share, 2*time.Minute)
		ctx, cancel := firstCommand(b, r)
		first = append(first, time.Since(r.start))
		c, err := cpuTime(r.vm.Pid())
		if err != nil {
			b.Fatal(err)
		}
		firstCPU = append(firstCPU, c)
		r.client.Close()
		if err := r.vm.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
	b.ReportMetric(float64(envInt(b, "BROOD_VMTEST_CPUS", 0)), "vcpus")
	b.ReportMetric(ms(median(bare)), "bare-ms")
	b.ReportMetric(ms(minimum(bare)), "bare-min-ms")
	b.ReportMetric(ms(median(panics)), "panic-ms")
	b.ReportMetric(ms(minimum(panics)), "panic-min-ms")
	b.ReportMetric(ms(median(first)), "first-cmd-ms")
	b.ReportMetric(ms(minimum(first)), "first-cmd-min-ms")
	b.ReportMetric(ms(median(first))/ms(median(bare)), "ratio-med")
	b.ReportMetric(ms(minimum(first))/ms(minimum(bare)), "ratio-min")
	b.ReportMetric(ms(median(first))/ms(median(panics)), "ratio-panic-med")
	b.ReportMetric(ms(minimum(first))/ms(minimum(panics)), "ratio-panic-min")
	b.ReportMetric(ms(median(bareCPU)), "bare-cpu-ms")
	b.ReportMetric(ms(median(firstCPU)), "first-cmd-cpu-ms")
	b.ReportMetric(ms(median(firstCPU))/ms(median(bareCPU)), "ratio-cpu")
}

// bootBare boots the test kernel and base initramfs with bareInit as /init: the
// baseline of a boot that reaches userspace and does nothing there.
func bootBare(t testing.TB, a *assets.Set, timeout time.Duration) *vmRun {
	t.Helper()
	dir := t.TempDir()
	keys, err := guestcfg.NewKeys()
	if err != nil {
		t.Fatal(err)
	}
	files, err := initramfs.SessionFiles(keys.Config())
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, initramfs.File{Name: bareInitPath, Mode: 0o755, Data: bareInit()})
	spec := sandbox.NewSpec(a.Kernel.Vmlinux, filepath.Join(dir, "initramfs.img"), filepath.Join(dir, "ssh.sock"), "")
	if err := initramfs.WithSession(a.Initramfs, spec.Initrd, files); err != nil {
		t.Fatal(err)
	}
	spec.RootfsImage = a.Image
	spec.Timeout = timeout
	spec.Cmdline = []string{"rdinit=/" + bareInitPath}
	return startVM(t, spec, keys, dir)
}

// bareInitPath is where bootBare puts bareInit in the initramfs.
const bareInitPath = "bare-init"

// bareInitMarker is the line bareInit writes to the console when it starts.
const bareInitMarker = "brood-bare-init: userspace reached\n"

// bareInit returns a static x86-64 ELF executable (ELF-64 object file format,
// System V gABI) of one PT_LOAD segment whose code writes bareInitMarker to fd 1 (the
// kernel opens /dev/console as init's stdio) and then calls reboot(2) with
// LINUX_REBOOT_CMD_POWER_OFF (include/uapi/linux/reboot.h; syscalls 1 and 169 on
// x86-64, arch/x86/entry/syscalls/syscall_64.tbl), spinning if that returns. As PID 1
// it ends the VM as soon as the kernel has started userspace: under microvm the
// power-off goes through the ACPI GED and, with -no-reboot, QEMU exits 0. Never run it
// on the host.
func bareInit() []byte {
	const base, ehdr, phdr = 0x400000, 64, 56
	code := []byte{
		0xbf, 0x01, 0x00, 0x00, 0x00, // mov edi, 1 (stdout)
		0x48, 0x8d, 0x35, 0, 0, 0, 0, // lea rsi, [rip+msg] (disp32 set below)
		0xba, byte(len(bareInitMarker)), 0x00, 0x00, 0x00, // mov edx, len(msg)
		0xb8, 0x01, 0x00, 0x00, 0x00, // mov eax, 1 (__NR_write)
		0x0f, 0x05, // syscall
		0xbf, 0xad, 0xde, 0xe1, 0xfe, // mov edi, 0xfee1dead (LINUX_REBOOT_MAGIC1)
		0xbe, 0x69, 0x19, 0x12, 0x28, // mov esi, 0x28121969 (LINUX_REBOOT_MAGIC2)
		0xba, 0xdc, 0xfe, 0x21, 0x43, // mov edx, 0x4321fedc (LINUX_REBOOT_CMD_POWER_OFF)
		0xb8, 0xa9, 0x00, 0x00, 0x00, // mov eax, 169 (__NR_reboot)
		0x0f, 0x05, // syscall
		0xeb, 0xfe, // jmp . (not reached)
	}
	const leaEnd = 12 // offset in code just after the lea, where rip points
	binary.LittleEndian.PutUint32(code[8:12], uint32(len(code)-leaEnd))
	code = append(code, bareInitMarker...)
	size := uint64(ehdr + phdr + len(code))
	b := make([]byte, 0, size)
	le := binary.LittleEndian
	b = append(b, 0x7f, 'E', 'L', 'F', 2 /* ELFCLASS64 */, 1 /* ELFDATA2LSB */, 1 /* EV_CURRENT */, 0 /* ELFOSABI_NONE */)
	b = append(b, make([]byte, 8)...)      // EI_ABIVERSION, padding
	b = le.AppendUint16(b, 2)              // e_type ET_EXEC
	b = le.AppendUint16(b, 0x3e)           // e_machine EM_X86_64
	b = le.AppendUint32(b, 1)              // e_version
	b = le.AppendUint64(b, base+ehdr+phdr) // e_entry: the code
	b = le.AppendUint64(b, ehdr)           // e_phoff
	b = le.AppendUint64(b, 0)              // e_shoff: no sections
	b = le.AppendUint32(b, 0)              // e_flags
	b = le.AppendUint16(b, ehdr)           // e_ehsize
	b = le.AppendUint16(b, phdr)           // e_phentsize
	b = le.AppendUint16(b, 1)              // e_phnum
	b = le.AppendUint16(b, 0)              // e_shentsize
	b = le.AppendUint16(b, 0)              // e_shnum
	b = le.AppendUint16(b, 0)              // e_shstrndx
	b = le.AppendUint32(b, 1)              // p_type PT_LOAD
	b = le.AppendUint32(b, 5)              // p_flags PF_R|PF_X
	b = le.AppendUint64(b, 0)              // p_offset: the whole file
	b = le.AppendUint64(b, base)           // p_vaddr
	b = le.AppendUint64(b, base)           // p_paddr
	b = le.AppendUint64(b, size)           // p_filesz
	b = le.AppendUint64(b, size)           // p_memsz
	b = le.AppendUint64(b, 0x1000)         // p_align
	return append(b, code...)
}

// waitConsole polls the console of r every millisecond until it holds marker, and
// returns the time since r started then and QEMU's CPU time so far; ok is false when
// the VM exited first or d passed.
func waitConsole(r *vmRun, marker string, d time.Duration) (since, cpu time.Duration, ok bool) {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
		// The console's tty turns "\n" into "\r\n" (ONLCR).
		if bytes.Contains(r.vm.ConsoleLog(), []byte(strings.TrimSuffix(marker, "\n"))) {
			since = time.Since(r.start)
			cpu, err := cpuTime(r.vm.Pid())
			return since, cpu, err == nil
		}
		if _, err := cpuTime(r.vm.Pid()); err != nil {
			return 0, 0, false
		}
	}
	return 0, 0, false
}

// cpuTime returns the user+system CPU time of process pid and all its threads so far
// (/proc/PID/stat fields 14 and 15, in clock ticks of 10 ms: USER_HZ is 100 on Linux).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')') // comm may hold spaces
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat: no comm", pid)
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks time.Duration
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
		}
		ticks += time.Duration(n)
	}
	return ticks * 10 * time.Millisecond, nil
}

// TestBareInit checks bareInit's ELF structure with debug/elf (it is run only as a
// VM's init, by the benchmark: on the host it would power the machine off).
func TestBareInit(t *testing.T) {
	f, err := elf.NewFile(bytes.NewReader(bareInit()))
	if err != nil {
		t.Fatal(err)
	}
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 || f.Type != elf.ET_EXEC || len(f.Progs) != 1 {
		t.Fatalf("ELF header: class %v machine %v type %v, %d program headers", f.Class, f.Machine, f.Type, len(f.Progs))
	}
	p := f.Progs[0]
	if p.Type != elf.PT_LOAD || p.Flags != elf.PF_R|elf.PF_X || f.Entry < p.Vaddr || f.Entry >= p.Vaddr+p.Filesz {
		t.Fatalf("segment %+v, entry %#x outside it", p.ProgHeader, f.Entry)
	}
	code := bareInit()[f.Entry-p.Vaddr:]
	if !bytes.Contains(code, []byte{0xb8, 0xa9, 0, 0, 0, 0x0f, 0x05}) {
		t.Errorf("code %x does not call syscall 169 (reboot)", code)
	}
	// lea rsi, [rip+disp32] must point at the marker it writes.
	rip := 12 + int(binary.LittleEndian.Uint32(code[8:12]))
	if msg := string(code[rip:]); msg != bareInitMarker {
		t.Errorf("write(1, ...) points at %q, want %q", msg, bareInitMarker)
	}
}
