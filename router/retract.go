package router

import "github.com/kvmesh/kvmesh/tree"

// claimEnder is a Learner that can also end claims: LocalLearner, and a
// mesh node, which replicates the tombstones to its peers.
type claimEnder interface {
	End(keys []tree.Key, backend tree.BackendID)
}

// heldBefore is the depth, in blocks, of the deepest unexpired claim the
// lookup that routed this attempt found on candidate i's backend,
// including claims the belief doubts or ignores: what the backend was
// believed to hold before the attempt learned anything.
func (st *reqState) heldBefore(i int) int32 {
	c := &st.cands[i]
	held := max(c.Matched, c.Near, c.Doubted, st.res.Depth(c.ID))
	if st.filtered {
		held = max(held, st.resAll.Depth(c.ID))
	}
	return held
}

// retract ends the claims an attempt learned provisionally at dispatch
// when it failed before a 2xx answer (a connection failure, a 5xx answer
// retried elsewhere, an error answer passed to the client): the backend
// did not compute the prompt, and the claims would otherwise steer the
// prompt's next requests to it for Config.ProvisionalTTL, each a miss.
// Only the learn positions deeper than held (heldBefore, taken before the
// learn) are ended: those at or above it were claimed before the attempt.
// A request sharing the prefix that reaches the backend meanwhile learns
// it again with a later timestamp, which the tombstones do not outlive.
// A Learner that cannot end claims leaves them to expire.
func (rt *Router) retract(st *reqState, b *backend, held int32) {
	e, ok := rt.learner.(claimEnder)
	if !ok || b.gone.Load() {
		return
	}
	keys := st.endBuf[:0]
	for _, p := range st.chain.Learn {
		if p > held && int(p) <= len(st.chain.Keys) {
			keys = append(keys, st.chain.Keys[p-1])
		}
	}
	st.endBuf = keys
	if len(keys) > 0 {
		e.End(keys, b.id)
		rt.metrics.retracted.Inc()
	}
}
