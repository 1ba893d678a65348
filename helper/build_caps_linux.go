//go:build linux

package helper

import (
	"strings"

	"kernel.org/pub/linux/libs/security/libcap/cap"
)

// buildCapabilities are the capabilities a recipe build needs beyond unitCapabilities:
// mmdebstrap in root mode mounts /proc, /sys and /dev into the tree (CAP_SYS_ADMIN),
// chroots (CAP_SYS_CHROOT), makes device nodes (CAP_MKNOD), and apt and dpkg write files
// of other owners and set file capabilities (CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_SETFCAP).
// pullCapabilities are a pull's: reading, packing and removing a tree whose files belong
// to other uids (CAP_DAC_OVERRIDE, CAP_FOWNER). Values: linux/capability.h.
var (
	buildCapabilities = []cap.Value{cap.SYS_ADMIN, cap.SYS_CHROOT, cap.MKNOD, cap.DAC_OVERRIDE, cap.FOWNER, cap.SETFCAP}
	pullCapabilities  = []cap.Value{cap.DAC_OVERRIDE, cap.FOWNER}
)

// missingBuildCaps lists ("CAP_SYS_ADMIN, ...") the capabilities a build (pull: a pull)
// needs that this process's bounding set lacks: a build child is a root execve of the
// spawner, which shares the helper's bounding set, so its permitted set is at most that.
// "" when none is missing.
func missingBuildCaps(pull bool) string {
	need := buildCapabilities
	if pull {
		need = pullCapabilities
	}
	var miss []string
	for _, v := range need {
		if in, err := cap.GetBound(v); err != nil || !in {
			miss = append(miss, strings.ToUpper(v.String()))
		}
	}
	return strings.Join(miss, ", ")
}
