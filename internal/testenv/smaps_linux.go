package testenv

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Mapping is one entry of /proc/PID/smaps (proc(5)): the address range [Start, End),
// the permissions ("rw-p"), the sizes in kB, and VmFlags' two-letter flags ("lo" locked,
// "dd" excluded from core dumps).
type Mapping struct {
	Start, End        uintptr
	Perms             string
	Size, Rss, Locked int // kB
	Flags             []string
}

// Has reports whether m's VmFlags include flag.
func (m Mapping) Has(flag string) bool {
	for _, f := range m.Flags {
		if f == flag {
			return true
		}
	}
	return false
}

// Contains reports whether the range [addr, addr+n) lies inside m.
func (m Mapping) Contains(addr, n uintptr) bool { return addr >= m.Start && addr+n <= m.End }

// Smaps parses /proc/PID/smaps ("self" for the caller). Reading another user's process
// needs PTRACE_MODE_READ over it (CAP_SYS_PTRACE for a non-dumpable one).
func Smaps(pid string) ([]Mapping, error) {
	data, err := os.ReadFile("/proc/" + pid + "/smaps")
	if err != nil {
		return nil, err
	}
	var out []Mapping
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok && len(f) >= 5 && !strings.HasSuffix(f[0], ":") {
			s, err1 := strconv.ParseUint(lo, 16, 64)
			e, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("/proc/%s/smaps: bad range %q", pid, f[0])
			}
			out = append(out, Mapping{Start: uintptr(s), End: uintptr(e), Perms: f[1]})
			continue
		}
		if len(out) == 0 {
			continue
		}
		m := &out[len(out)-1]
		switch f[0] {
		case "Size:":
			m.Size, _ = strconv.Atoi(f[1])
		case "Rss:":
			m.Rss, _ = strconv.Atoi(f[1])
		case "Locked:":
			m.Locked, _ = strconv.Atoi(f[1])
		case "VmFlags:":
			m.Flags = f[1:]
		}
	}
	return out, sc.Err()
}

// StatusKB returns the kB value of field (such as "VmLck") of /proc/PID/status.
func StatusKB(pid, field string) (int, error) {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, fmt.Errorf("/proc/%s/status: no %s", pid, field)
}
