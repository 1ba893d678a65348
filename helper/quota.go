package helper

import (
	"context"
	"fmt"
	"os"
	"sync"

	"brood.dev/brood/helper/api"
)

// uidQuota counts what each uid holds of something bounded per uid (connections, wait_vm
// calls in flight). The zero value is not usable: see newUIDQuota.
type uidQuota struct {
	mu   sync.Mutex
	max  int
	held map[uint32]int
}

func newUIDQuota(max int) *uidQuota { return &uidQuota{max: max, held: map[uint32]int{}} }

// acquire takes one unit for uid, or reports false when uid holds max already.
func (q *uidQuota) acquire(uid uint32) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.held[uid] >= q.max {
		return false
	}
	q.held[uid]++
	return true
}

// release returns one unit of uid's.
func (q *uidQuota) release(uid uint32) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.held[uid]--; q.held[uid] <= 0 {
		delete(q.held, uid)
	}
}

// waitVMCall is wait_vm under the caller's wait quota (MaxWaitsPerUser): a uid with that
// many wait_vm calls in flight gets api.ErrLimit at once, so one uid's waits never occupy
// more than its share of the connections.
func (s *Server) waitVMCall(ctx context.Context, st *connState, req *api.Request, files []*os.File) (any, []*os.File, error) {
	uid := st.cred.UID
	if !s.waits.acquire(uid) {
		return nil, nil, fmt.Errorf("wait_vm: uid %d has %d waits in flight (max_waits_per_user): %w", uid, s.cfg.MaxWaitsPerUser, api.ErrLimit)
	}
	defer s.waits.release(uid)
	return s.vmCall(ctx, st, req, files)
}
