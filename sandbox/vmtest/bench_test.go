package vmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/sandbox"
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
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		if err := r.dialCtx(ctx); err != nil {
			cancel()
			b.Fatalf("dial: %v\n%s", err, r.vm.ConsoleLog())
		}
		s, err := r.client.NewSession()
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Run("true"); err != nil {
			b.Fatal(err)
		}
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

// BenchmarkVMBareBoot is the baseline: the same kernel and initramfs with an init that
// does not exist, so the kernel boots, panics at once and QEMU exits (bare-ms).
func BenchmarkVMBareBoot(b *testing.B) {
	a := Get(b)
	var bare []time.Duration
	for b.Loop() {
		r := bootB(b, a, "", time.Minute, "rdinit=/nonexistent")
		err := r.vm.Wait(context.Background())
		if !errors.Is(err, sandbox.ErrVMFailed) {
			b.Fatalf("bare boot: %v", err)
		}
		bare = append(bare, time.Since(r.start))
	}
	b.ReportMetric(ms(median(bare)), "bare-ms")
	b.ReportMetric(ms(minimum(bare)), "bare-min-ms")
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

// BenchmarkVMBootRatio interleaves, b.N times each, a bare boot (as BenchmarkVMBareBoot)
// and a session boot with a workspace share up to the first SSH command done (as
// BenchmarkVMSession), so both see the same machine load. It reports min and median of
// each (bare-ms, bare-min-ms, first-cmd-ms, first-cmd-min-ms) and their ratios
// (ratio-med, ratio-min; issue 4's goal is <= 1.3). On a busy host wall-clock TCG
// timings swing by 2x, so it also reports the CPU time QEMU used (user+system, all
// threads, 10 ms ticks) for the same two spans (bare-cpu-ms, first-cmd-cpu-ms, medians)
// and their ratio (ratio-cpu): that is the work brood adds, mostly independent of load.
// sandbox/vmtest/bench.sh prints them.
func BenchmarkVMBootRatio(b *testing.B) {
	a := Get(b)
	share := b.TempDir()
	var bare, first, bareCPU, firstCPU []time.Duration
	for b.Loop() {
		r := bootB(b, a, "", time.Minute, "rdinit=/nonexistent")
		last := make(chan time.Duration)
		go func() { // the last sample before QEMU exits
			var c time.Duration
			for {
				t, err := cpuTime(r.vm.Pid())
				if err != nil {
					last <- c
					return
				}
				c = t
				time.Sleep(2 * time.Millisecond)
			}
		}()
		if err := r.vm.Wait(context.Background()); !errors.Is(err, sandbox.ErrVMFailed) {
			b.Fatalf("bare boot: %v", err)
		}
		bare = append(bare, time.Since(r.start))
		bareCPU = append(bareCPU, <-last)

		r = bootB(b, a, share, 2*time.Minute)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		if err := r.dialCtx(ctx); err != nil {
			cancel()
			b.Fatalf("dial: %v\n%s", err, r.vm.ConsoleLog())
		}
		s, err := r.client.NewSession()
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Run("true"); err != nil {
			b.Fatal(err)
		}
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
	b.ReportMetric(ms(median(bare)), "bare-ms")
	b.ReportMetric(ms(minimum(bare)), "bare-min-ms")
	b.ReportMetric(ms(median(first)), "first-cmd-ms")
	b.ReportMetric(ms(minimum(first)), "first-cmd-min-ms")
	b.ReportMetric(ms(median(first))/ms(median(bare)), "ratio-med")
	b.ReportMetric(ms(minimum(first))/ms(minimum(bare)), "ratio-min")
	b.ReportMetric(ms(median(bareCPU)), "bare-cpu-ms")
	b.ReportMetric(ms(median(firstCPU)), "first-cmd-cpu-ms")
	b.ReportMetric(ms(median(firstCPU))/ms(median(bareCPU)), "ratio-cpu")
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
