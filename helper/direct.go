package helper

import (
	"fmt"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
)

// checkDirect refuses a StartVM in direct mode (a.Direct: the share is the workspace
// itself, no snapshot, no review) when the system policy forbids it (forbid_direct) or
// cannot be read, and logs an audit line for one it allows. Errors wrap api.ErrPolicy.
func (s *Server) checkDirect(uid uint32, a api.StartVMArgs) error {
	if !a.Direct {
		return nil
	}
	sys, err := netpolicy.LoadSystemPolicy(s.cfg.Egress.PolicyPath)
	if err != nil {
		return fmt.Errorf("start VM of session %s in direct mode: %w: %w", a.ID, api.ErrPolicy, err)
	}
	if sys != nil && sys.ForbidDirect {
		return fmt.Errorf("start VM of session %s in direct mode: %w: the system policy %s forbids it (forbid_direct = true)",
			a.ID, api.ErrPolicy, s.cfg.Egress.PolicyPath)
	}
	s.log.Warn("audit: direct mode: the VM mounts the workspace read-write, no review", "uid", uid, "session", a.ID)
	return nil
}
