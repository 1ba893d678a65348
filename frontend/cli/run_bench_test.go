package cli_test

import (
	"sort"
	"testing"
	"time"
)

// BenchmarkRunImage runs the whole `brood run-image test -- true` as the developer:
// helper connection, snapshot of a small git repository, StartVM, boot, SSH, the
// command, stop, diff. It reports the median over b.N runs of StartVM to the SSH
// handshake done (boot-ms, "boot to prompt"), StartVM to the VMM gone (vm-ms) and the
// whole brood command (whole-ms). scripts/bench-run.sh compares them with a bare boot
// of the same kernel and initramfs (sandbox/vmtest BenchmarkVMBareBoot).
func BenchmarkRunImage(b *testing.B) {
	r := getRig(b)
	w := r.workspace("w-bench")
	var boot, vm, whole []time.Duration
	for b.Loop() {
		start := time.Now()
		code, _, stderr := r.run(w, "run-image", "test", "--", "true")
		el := time.Since(start)
		if code != 0 {
			b.Fatalf("brood run-image: exit %d\n%s", code, stderr)
		}
		rec := r.record(sessionID(b, stderr))
		boot = append(boot, time.Duration(rec.BootSeconds*float64(time.Second)))
		vm = append(vm, time.Duration(rec.VMSeconds*float64(time.Second)))
		whole = append(whole, el)
	}
	b.ReportMetric(msMedian(boot), "boot-ms")
	b.ReportMetric(msMedian(vm), "vm-ms")
	b.ReportMetric(msMedian(whole), "whole-ms")
}

func msMedian(d []time.Duration) float64 {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}
