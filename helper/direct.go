package helper

import (
	"fmt"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/netpolicy"
)

// checkDirect refuses a StartVM in direct mode (a.Direct: the share is the workspace
// itself, no snapshot, no review) when the system policy forbids it (forbid_direct) or
// cannot be read, and logs an audit line for one it allows. A refused session is
// destroyed (dropRefused): its share is the workspace itself and no VM may ever use it.
// Errors wrap api.ErrPolicy.
func (s *Server) checkDirect(uid uint32, a api.StartVMArgs) error {
	if !a.Direct {
		return nil
	}
	sys, err := netpolicy.LoadSystemPolicy(s.cfg.Egress.PolicyPath)
	if err != nil {
		s.dropRefused(uid, a.ID)
		return fmt.Errorf("start VM of session %s in direct mode: %w: %w", a.ID, api.ErrPolicy, err)
	}
	if sys != nil && sys.ForbidDirect {
		s.dropRefused(uid, a.ID)
		return fmt.Errorf("start VM of session %s in direct mode: %w: the system policy %s forbids it (forbid_direct = true)",
			a.ID, api.ErrPolicy, s.cfg.Egress.PolicyPath)
	}
	s.log.Warn("audit: direct mode: the VM mounts the workspace read-write, no review", "uid", uid, "session", a.ID)
	return nil
}

// dropRefused destroys session id of uid after its direct-mode StartVM was refused,
// closing its share descriptor. A session uid may not act on, or that does not exist,
// or whose VM another call is starting, is left as it is (Table.Destroy's checks); the
// refusal stands either way.
func (s *Server) dropRefused(uid uint32, id string) {
	if err := s.sessions.Destroy(id, uid); err != nil {
		s.log.Info("direct mode refused; session not destroyed", "uid", uid, "session", id, "err", err)
		return
	}
	s.log.Info("audit: session destroyed: direct mode refused", "uid", uid, "session", id)
}

// checkSSHAgent refuses a StartVM that forwards the developer's SSH agent (a.SSHAgent)
// when the system policy forbids it (allow_ssh_agent = false) or cannot be read. Errors
// wrap api.ErrPolicy.
func (s *Server) checkSSHAgent(uid uint32, a api.StartVMArgs) error {
	if !a.SSHAgent {
		return nil
	}
	sys, err := netpolicy.LoadSystemPolicy(s.cfg.Egress.PolicyPath)
	if err != nil {
		return fmt.Errorf("start VM of session %s with --ssh-agent: %w: %w", a.ID, api.ErrPolicy, err)
	}
	if sys != nil && sys.ForbidSSHAgent {
		return fmt.Errorf("start VM of session %s with --ssh-agent: %w: the system policy %s forbids it (allow_ssh_agent = false)",
			a.ID, api.ErrPolicy, s.cfg.Egress.PolicyPath)
	}
	s.log.Info("audit: the session forwards the developer's filtered SSH agent", "uid", uid, "session", a.ID)
	return nil
}
