//go:build linux

package helper

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"kernel.org/pub/linux/libs/security/libcap/cap"

	"brood.dev/brood/helper/api"
)

// unitCapabilities is the helper's capability set: exactly the CapabilityBoundingSet of
// systemd/broodd-helper.service (that unit's comments say what each one is for;
// TestUnitCapabilitiesMatchUnit checks the two lists against each other). The values are
// those of linux/capability.h.
var unitCapabilities = []cap.Value{cap.NET_ADMIN, cap.SETUID, cap.SETGID, cap.KILL, cap.CHOWN, cap.NET_BIND_SERVICE}

// dropCapabilities reduces every thread of the process to unitCapabilities, whoever
// started it (systemd, a root shell, an init without capability settings): the
// inheritable and ambient sets are cleared, every capability outside the list leaves the
// bounding set (PR_CAPBSET_DROP, so no execve can regain it, not even of a setuid-root
// program), and effective = permitted = the list (those of it the process had). libcap's
// cap package applies each change to all threads (psx), as the kernel keeps capabilities
// per thread.
//
// Run calls it before it starts any child, so the runner spawner, the egress processes
// and image-unpack inherit no more than the list (a root execve gets permitted = bounding
// set). Dropping the bounding set needs CAP_SETPCAP, which is dropped last; a process
// whose bounding set is already the list (the unit's) needs none. As root, any failure is
// returned (fail closed); without root, only the sets the process may change are changed
// and a bounding set it cannot drop is logged.
func dropCapabilities(log *slog.Logger) error {
	keep := map[cap.Value]bool{}
	for _, v := range unitCapabilities {
		keep[v] = true
	}
	iab := cap.IABInit() // empty inheritable and ambient vectors
	extra := false
	for v := cap.Value(0); v < cap.MaxBits(); v++ {
		if keep[v] {
			continue
		}
		if err := iab.SetVector(cap.Bound, true, v); err != nil {
			return fmt.Errorf("drop capabilities: bounding set %s: %w", v, err)
		}
		if in, _ := cap.GetBound(v); in {
			extra = true
		}
	}
	if err := iab.SetProc(); err != nil {
		if os.Geteuid() == 0 || !extra {
			return fmt.Errorf("drop capabilities: inheritable, ambient and bounding sets: %w", err)
		}
		log.Warn("not root: the bounding set keeps capabilities outside the unit's list", "err", err)
		if err := cap.ResetAmbient(); err != nil {
			return fmt.Errorf("drop capabilities: clear ambient set: %w", err)
		}
	}
	have := cap.GetProc()
	want := cap.NewSet()
	for _, v := range unitCapabilities {
		if on, _ := have.GetFlag(cap.Permitted, v); !on {
			continue
		}
		if err := want.SetFlag(cap.Permitted, true, v); err != nil {
			return fmt.Errorf("drop capabilities: %s: %w", v, err)
		}
		if err := want.SetFlag(cap.Effective, true, v); err != nil {
			return fmt.Errorf("drop capabilities: %s: %w", v, err)
		}
	}
	if err := want.SetProc(); err != nil {
		return fmt.Errorf("drop capabilities to %s: %w", want, err)
	}
	return nil
}

// capabilitiesCheck is the Doctor check "capabilities": the helper's effective,
// bounding, ambient and inheritable sets as capability names (capabilities(7)). It fails
// when the effective or bounding set holds a capability outside unitCapabilities, or the
// ambient or inheritable set is not empty; it warns when a capability of the list is
// missing from the effective set (the operation that needs it will fail).
func capabilitiesCheck() api.Check {
	set := cap.GetProc()
	var eff, bnd, amb, inh, extra, missing []string
	for v := cap.Value(0); v < cap.MaxBits(); v++ {
		listed := slices.Contains(unitCapabilities, v)
		if on, _ := set.GetFlag(cap.Effective, v); on {
			eff = append(eff, v.String())
			if !listed {
				extra = append(extra, v.String())
			}
		} else if listed {
			missing = append(missing, v.String())
		}
		if on, _ := cap.GetBound(v); on {
			bnd = append(bnd, v.String())
			if !listed {
				extra = append(extra, v.String()+" (bounding)")
			}
		}
		if on, _ := cap.GetAmbient(v); on {
			amb = append(amb, v.String())
		}
		if on, _ := set.GetFlag(cap.Inheritable, v); on {
			inh = append(inh, v.String())
		}
	}
	ch := api.Check{Name: "capabilities", OK: len(extra) == 0 && len(amb) == 0 && len(inh) == 0, Warn: len(missing) > 0,
		Detail: fmt.Sprintf("effective %s; bounding %s; ambient %s; inheritable %s", capList(eff), capList(bnd), capList(amb), capList(inh))}
	if len(extra) > 0 {
		ch.Detail += "; outside the unit's set: " + strings.Join(extra, ",")
	}
	if len(missing) > 0 {
		ch.Detail += "; missing (the operations that need them fail): " + strings.Join(missing, ",")
	}
	return ch
}

func capList(names []string) string {
	if len(names) == 0 {
		return "(none)"
	}
	return strings.Join(names, ",")
}
