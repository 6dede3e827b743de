package router

import (
	"slices"

	"github.com/kvmesh/kvmesh/tree"
)

// The request path's side of the eviction order (evictorder.go): an
// attempt pins the claims it matched, its end releases the prompt's claims
// into the order, and the eviction edge prices a trusted match by the
// units queued ahead of its claims.

// orderKept says this router keeps b's eviction order.
//
// A node of a mesh does not keep the order: it would hold only its own
// requests' claims, and its peers' requests release and pin the same
// prefixes (a shared context most of all) in between.
func (rt *Router) orderKept(b *backend) bool {
	pc := rt.precise
	return pc != nil && pc.cfg.EvictionOrder && rt.peers == nil && pc.linkedOn(b)
}

// orderOn says st's attempts on b feed and read b's eviction order.
func (rt *Router) orderOn(st *reqState, b *backend) bool {
	return st.routed && !st.precise && rt.orderKept(b)
}

// orderPin readies the pin of the claims of learn (the prompt's learn
// depths) down to matched blocks on b, for an attempt about to be sent
// there. The engine takes them out of its LRU when it schedules the
// request, not when the router sends it: until then they can be evicted
// like any other, so they are pinned at the answer's first byte
// (orderPinNow), and only awaited until then: a trim holds them instead
// of taking them as gone (evictOrder.trim).
func (rt *Router) orderPin(st *reqState, b *backend, learn []int32, matched int32) {
	st.orderPinned, st.orderWant, st.orderB, st.orderFirst = 0, 0, nil, false
	if !rt.orderOn(st, b) || matched <= 0 {
		return
	}
	st.orderKeys = st.orderKeys[:0]
	for _, d := range learn {
		if d > matched || int(d) > len(st.chain.Keys) {
			break
		}
		st.orderKeys = append(st.orderKeys, st.chain.Keys[d-1])
	}
	st.orderWant, st.orderB = matched, b
	b.order.await(st.orderKeys)
}

// orderPinNow pins what orderPin readied: the attempt's first byte came,
// so the engine has scheduled it.
func (st *reqState) orderPinNow() {
	st.orderFirst = true
	if b := st.orderB; b != nil {
		st.orderB = nil
		b.order.pin(st.orderKeys)
		st.orderPinned = st.orderWant
	}
}

// orderRelease ends an attempt's hold on b: answered, the engine holds
// every claim of learn and releases them now; otherwise only what it
// pinned goes back into the order.
func (rt *Router) orderRelease(st *reqState, b *backend, learn []int32, answered bool) {
	if st.orderB != nil { // sent, never scheduled
		b.order.unawait(st.orderKeys)
	}
	st.orderB = nil
	// An answer that broke off after its first byte keeps its claims
	// (confirmClaims): the engine computed the prompt all the same.
	answered = answered || st.orderFirst
	st.orderFirst = false
	if st.orderPinned == 0 && !(answered && rt.orderOn(st, b)) {
		return
	}
	st.orderSegs = st.orderSegs[:0]
	prev := 0
	for _, d := range learn {
		if int(d) > len(st.chain.Keys) {
			break
		}
		if !answered && d > st.orderPinned {
			break
		}
		u := min(st.chain.UnitsAt(int(d)), st.chain.Units)
		st.orderSegs = append(st.orderSegs, segment{key: st.chain.Keys[d-1], units: float64(u - prev), pinned: d <= st.orderPinned})
		prev = u
	}
	b.order.release(st.orderSegs, rt.now().UnixMilli())
	st.orderPinned = 0
}

// orderDiscount is the eviction edge by the order: the share of c's
// trusted match m on b whose claims have less queued ahead of them than
// the engine allocates before it schedules the request, beyond the deepest
// claim of the prompt that has more.
//
// What the engine allocates first (orderNeed) leaves out what it has
// already computed of the head's prefill: counting the head's whole
// booking overstated it where prompts are long (on Mooncake 2x the order
// cost 0.3-0.6 points of hit rate with it, and gains 0.1-0.5 without).
func (rt *Router) orderDiscount(st *reqState, b *backend, c *Candidate, m tree.Match) float64 {
	if m.Blocks <= 0 || int(m.Blocks) > len(st.chain.Keys) {
		return 0
	}
	if _, full := b.edge.retention(); !full {
		// No eviction yet: the engine allocates from blocks it never used
		// before it evicts one the order holds.
		return 0
	}
	need := orderNeed(c.Load)
	band := orderBandShare*need + float64(st.chain.UnitsAt(orderBandBlocks))
	risk := func(p orderPlace) float64 {
		switch p.state {
		case orderQueued:
			return orderRisk(p.ahead, need, band)
		case orderGone:
			return 1
		}
		return 0
	}
	var p orderPlace
	p.ahead, p.state = b.order.ahead(st.chain.Keys[m.Blocks-1], need)
	deep := risk(p)
	if deep == 0 {
		return 0
	}
	// The shallower claims (Learn is ascending: a prefix of it), in one
	// walk of the order; doubtBeyondSafe asks for them by index.
	st.orderLook = st.orderLook[:0]
	for _, d := range st.chain.Learn {
		if d >= m.Blocks || int(d) > len(st.chain.Keys) {
			break
		}
		st.orderLook = append(st.orderLook, st.chain.Keys[d-1])
	}
	st.orderPlaces = slices.Grow(st.orderPlaces[:0], len(st.orderLook))[:len(st.orderLook)]
	b.order.aheadOf(st.orderLook, need, st.orderPlaces)
	return doubtBeyondSafe(st, c, m, deep, func(i int, d int32) bool { // evictedge.go
		if i >= len(st.orderPlaces) { // not reached while Learn ascends
			var p orderPlace
			p.ahead, p.state = b.order.ahead(st.chain.Keys[d-1], need)
			return risk(p) == 0
		}
		return risk(st.orderPlaces[i]) == 0
	})
}

// orderNeed is what the engine allocates before it schedules a request
// sent now: the prefill booked ahead of it, less what the engine has had
// time to compute of the head's. The order is kept only without peers
// (orderKept): their bookings do not count.
func orderNeed(l LoadView) float64 {
	return max(l.PendingPrefill-min(l.HeadProgress, l.HeadBooked), 0)
}

// orderBandBlocks is the least half-width of the band over which the
// order's doubt rises, in blocks: the engine's allocations are known to
// about a request's tail.
const orderBandBlocks = 32

// orderBandShare is the band's share of the prefill booked ahead.
const orderBandShare = 0.25
