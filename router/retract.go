package router

import (
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// claimRetracter is a Learner that can also end the claims it learned for
// ttl: LocalLearner, and a mesh node, which replicates the tombstones to
// its peers.
type claimRetracter interface {
	Retract(keys []tree.Key, backend tree.BackendID, ttl time.Duration)
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
// And only claims expiring no later than provisional ones learned at the
// retraction would (Retract): a request sharing the prefix that the
// backend answered meanwhile, through this node or a peer, confirmed them
// at ConfirmedTTL, and an engine's KV events (precise mode) lease them for
// longer still; ending those would hide a prefix the backend holds for
// their whole TTL. A concurrent attempt's provisional claims may end
// with this one's; its answer's first byte learns them again, past the
// tombstones. A Learner that cannot end claims leaves them to expire.
func (rt *Router) retract(st *reqState, b *backend, held int32) {
	e, ok := rt.learner.(claimRetracter)
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
		e.Retract(keys, b.id, rt.cfg.ProvisionalTTL)
		rt.metrics.retracted.Inc()
	}
}
