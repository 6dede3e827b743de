package router

import (
	"sync/atomic"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// Lost prefixes: an answer that reports far fewer cached tokens than the
// router believed the backend held (a refuted match) says the backend lost
// that prompt's prefix, though the request then computed it there again.
// A backend that lost a conversation's context between two of its requests
// is thrashing for that conversation (its cache could not keep the context
// from one request to the next: other contexts crowd it) and will likely
// lose it again. So the prompt is marked lost at that backend, and when
// the conversation's next request matches the backend at that prompt's
// depth, its match is doubted there (it counts at the backend's learned
// doubt worth, BeliefConfig.DoubtLearn), which lets the cost model move
// the conversation to a backend with room, as a router that saw the real
// caches would. The aggregate belief (the capacity learned from answers)
// also reacts to such misses, but for every claim at the backend alike.

// lostSlots is the size of the set of lost prefixes: far more
// conversations than a fleet serves within BeliefConfig.LostTTL. A
// colliding mark takes the slot over; a forgotten mark costs only the
// behaviour without it.
const lostSlots = 4096

// lostSet is a direct-mapped set of (prompt key, backend) marks with the
// time each was made. It never allocates after construction, and is
// approximate by design: a mark and its time are two words written
// without a lock (the time first), so a reader racing a writer may pair
// the slot's old mark with the new time (an expired or overwritten mark
// reads as fresh for that one lookup), and two writers racing on a slot
// may pair one's mark with the other's time.
type lostSet struct {
	slots [lostSlots]lostSlot
}

type lostSlot struct {
	tag atomic.Uint64 // 0: empty
	ms  atomic.Int64
}

// lostTag combines a prompt key and a backend into a slot tag (never 0).
func lostTag(k tree.Key, id tree.BackendID) uint64 {
	t := mix64(uint64(k) ^ (uint64(id)+1)*0x9e3779b97f4a7c15)
	if t == 0 {
		t = 1
	}
	return t
}

// mark records that backend id lost the prompt whose last learn position
// has key k, at nowMs.
func (s *lostSet) mark(k tree.Key, id tree.BackendID, nowMs int64) {
	t := lostTag(k, id)
	sl := &s.slots[t%lostSlots]
	sl.ms.Store(nowMs)
	sl.tag.Store(t)
}

// markIfNewer marks like mark unless the slot holds the same mark made
// later (a peer's older mark must not shorten this node's newer one); it
// reports whether it marked.
func (s *lostSet) markIfNewer(k tree.Key, id tree.BackendID, ms int64) bool {
	t := lostTag(k, id)
	sl := &s.slots[t%lostSlots]
	if sl.tag.Load() == t && sl.ms.Load() >= ms {
		return false
	}
	sl.ms.Store(ms)
	sl.tag.Store(t)
	return true
}

// lost reports whether backend id lost the prompt ending at key k within
// ttlMs before nowMs.
func (s *lostSet) lost(k tree.Key, id tree.BackendID, nowMs, ttlMs int64) bool {
	t := lostTag(k, id)
	sl := &s.slots[t%lostSlots]
	return sl.tag.Load() == t && nowMs-sl.ms.Load() < ttlMs
}

// leafKey is the key of a prompt's last learn position, and its depth in
// blocks: where its conversation's next request will match the backend
// that served it.
func leafKey(ch *tree.Chain) (tree.Key, int32, bool) {
	if ch == nil || len(ch.Learn) == 0 {
		return 0, 0, false
	}
	d := ch.Learn[len(ch.Learn)-1]
	if d < 1 || int(d) > len(ch.Keys) {
		return 0, 0, false
	}
	return ch.Keys[d-1], d, true
}

// lostAt reports whether b's match at depth blocks of st's prompt is a
// prompt b was found to have lost within LostTTL (a conversation's
// previous request, refuted there).
func (rt *Router) lostAt(st *reqState, b *backend, blocks int32, now time.Time) bool {
	ttl := rt.cfg.Belief.LostTTL.Milliseconds()
	if ttl <= 0 || blocks < 1 || int(blocks) > len(st.chain.Keys) {
		return false
	}
	return rt.lost.lost(st.chain.Keys[blocks-1], b.id, now.UnixMilli(), ttl)
}
