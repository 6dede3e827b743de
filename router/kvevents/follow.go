package kvevents

import (
	"context"
	"time"
)

// Owned returns the backends among streams whose owner, over members, is
// self (see Owner).
func Owned(self string, members []string, backends []string) []string {
	var out []string
	for _, b := range backends {
		if Owner(b, members) == self {
			out = append(out, b)
		}
	}
	return out
}

// FollowMembers keeps SetOwned in step with the mesh: every interval it
// asks members() for the alive members (this node included) and consumes
// exactly the streams this node owns among them. When an owner fails, serf
// marks it failed on every node within its failure detection, each
// survivor recomputes, and the next-ranked member takes the stream over
// (and resyncs: replay from 0, else invalidate). It returns when ctx ends.
func (m *Manager) FollowMembers(ctx context.Context, self string, members func() []string, interval time.Duration) {
	backends := m.Backends()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ms := members()
		if len(ms) == 0 {
			ms = []string{self} // before membership is up: alone
		}
		m.SetOwned(Owned(self, ms, backends))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
