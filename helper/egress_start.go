package helper

import (
	"fmt"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/helper/egress"
)

// startEgress sets up session s's network when a names a profile; nil without one.
func (srv *Server) startEgress(s *sessionRecord, a api.StartVMArgs) (*egress.Session, error) {
	if a.Egress == "" {
		return nil, nil
	}
	if srv.egress == nil {
		return nil, fmt.Errorf("egress of session %s: not available on this helper: %w", s.ID, api.ErrUnavailable)
	}
	return srv.egress.Start(a, s.Owner, s.gid)
}
