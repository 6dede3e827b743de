package router

import (
	"math"

	"github.com/kvmesh/kvmesh/tree"
)

// Restating a booking when its prefix is evicted (eviction-link backends).
//
// A dispatch books the prompt less what the claims say the backend holds
// (backend.addPending). An engine's KV events come about a step late
// (evictedge.go), so a request can be routed on claims whose blocks are
// already gone, or go while it waits in the engine's queue (a waiting
// request pins nothing). It then computes what was booked as held, and
// until its first byte every later decision sees the backend's queue
// shorter than it is. When the events end a claim a pending request was
// routed on, the router knows: the request's booking is restated to
// count the blocks past the deepest of its claims still standing, and
// the backend's pending prefill (and the mesh's view of it) with it. On
// the customers benchmark the requests routed on such claims were 16% of
// the slowest 5%; the ones queued behind them were more.

// maxBookedClaims is how many of a request's claims its booking remembers:
// the deepest ones it was routed on (a conversation's last turns and its
// shared context are the ones eviction takes).
const maxBookedClaims = 4

// bookedClaims are the claims a pending request was routed on: the byte
// keys of the learn positions within its match, shallowest first, with
// their depth in units, and the units its booking counted as held.
type bookedClaims struct {
	keys  [maxBookedClaims]tree.Key
	units [maxBookedClaims]float64
	n     int
	saved float64
}

// routedOn fills c from the request's chain, matched blocks deep on its
// backend, of which the booking counted saved units as held.
func (c *bookedClaims) routedOn(ch *tree.Chain, matched int32, saved float64) {
	*c = bookedClaims{saved: saved}
	if saved <= 0 || matched <= 0 {
		return
	}
	// The deepest learn positions within the match, shallowest first.
	hi := len(ch.Learn)
	for hi > 0 && ch.Learn[hi-1] > matched {
		hi--
	}
	lo := max(hi-maxBookedClaims, 0)
	for _, d := range ch.Learn[lo:hi] {
		if d < 1 || int(d) > len(ch.Keys) {
			continue
		}
		c.keys[c.n], c.units[c.n] = ch.Keys[d-1], float64(min(ch.UnitsAt(int(d)), ch.Units))
		c.n++
	}
}

// lost is how much of the booking's saving the ended claims take (0 when
// none of ended is among its claims): everything past the claim just
// shallower than the shallowest one that ended (past nothing, when that is
// the shallowest it remembers), at most the saving. The engine evicts a
// prefix from its tail, so the blocks past an ended claim are gone too;
// the ones between it and the claim before it may not be, but one
// eviction usually takes a finished request's blocks together, and a
// booking that counts them is the safer error.
func (c *bookedClaims) lost(ended []tree.Key) float64 {
	for i := 0; i < c.n; i++ {
		for _, k := range ended {
			if k != c.keys[i] {
				continue
			}
			kept := 0.0
			if i > 0 {
				kept = c.units[i-1]
			}
			held := c.units[c.n-1] // what the claims said; saved may count less of it (a discount)
			return min(max(held-kept, 0), c.saved)
		}
	}
	return 0
}

// restate adds to the bookings of the pending requests routed on any of
// the ended claims what those claims took from them, and returns the
// units added.
func (q *prefillQueue) restate(ended []tree.Key) float64 {
	if len(ended) == 0 {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	added := 0.0
	for i := q.h; i < len(q.q); i++ {
		e := &q.q[i]
		if e.released || e.claims.n == 0 {
			continue
		}
		if extra := math.Floor(e.claims.lost(ended) - e.restated); extra > 0 {
			e.restated += extra
			e.booked += extra
			if !e.silent {
				q.sum += extra
			}
			added += extra
		}
	}
	return added
}

// routedOn records the claims request seq was routed on (bookedClaims),
// for restate.
func (q *prefillQueue) routedOn(seq uint64, ch *tree.Chain, matched int32, saved float64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i, ok := q.index(seq); ok {
		q.q[i].claims.routedOn(ch, matched, saved)
	}
}

// restateBookings restates the bookings at b that the ended claims took
// from (EndLinked).
func (rt *Router) restateBookings(b *backend, ended []tree.Key) {
	if added := b.queue.restate(ended); added > 0 {
		b.pendingUnits.Add(int64(added))
		if b.booked != nil {
			b.booked()
		}
	}
}

// linkedBooking says whether a booking of st at b is restated when b's
// engine evicts what it was routed on: b is in eviction-link mode and st
// keyed by bytes (the claims its links end).
func (rt *Router) linkedBooking(st *reqState, b *backend) bool {
	pc := rt.precise
	return pc != nil && pc.links != nil && !st.precise && pc.linkedOn(b)
}
