package router

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// The eviction edge of an eviction-link backend: how long its engine
// keeps a released prefix (always measured, kvmesh_router_backend_
// eviction_retention_seconds) and, with PreciseConfig.EvictionLag set, a
// doubt on the claims that measure says will be gone before a request
// reaches the engine.
//
// Eviction links make a backend's claims exact, but late: an engine
// evicts blocks while it schedules a step and publishes the events after
// the step has run (vLLM's scheduler, in update_from_output), so for about
// a step the router still trusts claims on blocks that are gone. And a
// request waits in the engine's queue before its prefix is pinned: blocks
// next in line for eviction can go while it waits. On the customers
// benchmark (kvmesh+evict, 3,000 requests a run) 55-79 prefix routes a
// run found at their backend less than their claims said, most of them
// only what the engine held when the request was sent (the rest of the
// prompt evicted, the events not read yet): 16% of the slowest 5% of
// requests, and why the arm's TTFT p99 trailed the oracle's, which sees
// the engines' caches as they are.
//
// The engine evicts in LRU order of release (a request's blocks enter the
// LRU when it ends), which is the order of the claims' stamps: a claim is
// stamped again when its answer completes. So each removal that ends a
// link says how long that backend keeps a released prefix: the retention
// R, the time it was read less the newest release among the links it
// ended. A claim stamped at T is expected to be evicted at about
// T + R - lag (R is measured from events a lag late). A request sent now
// reaches the engine's scheduler after the prefill queued ahead of it (the
// mesh's bookings at the backend, at the rate its answers showed); if the
// claim is expected to go before then, the blocks it alone covers are
// doubted: Candidate.Discount rises from 0 to 1 as that margin goes from
// +lag to -lag. The shallower claims of the same prompt that were stamped
// since (a context other conversations share) keep their trust.
//
// Off by default, for what it costs: on customers (kvmesh+evict, one run
// each, alternating; lag 250 ms scaled to the time scale) the doubt cut
// the stale prefix routes from 64-72 a run to 17-30 and the TTFT p99 from
// 1.17-1.33 s (1.24 median of 3) to 1.06-1.20 s (1.13 median of 4), but
// sent 70-82 requests a run away from a backend that still held their
// prefix, and the hit rate fell from 50.4-50.5% to 48.9-49.4%. The
// retention is not steady enough to tell a claim evicted a step ago from
// one a step from its eviction: per backend it varies by 17-19% (standard
// deviation over mean; about 200 ms of 1.2 s at time scale 10), most of it
// real (the engine's running requests pin more or less of its cache), and
// the doubt at half strength (capped at 0.5) changed no decision. Nor is
// the wait the cost: with no wait counted (a claim doubted only once the
// retention says it is gone already; 3 pairs) the p99 fell to 0.86x and
// the hit rate still by a point, and a margin of 15% on the retention
// spared the stale routes with the live ones (docs/bench/HISTORY.md,
// "Re-deciding a request whose prefix is evicted before its first
// token").

// maxEdgeDiscount keeps Candidate.Discount below 1, as its contract says.
const maxEdgeDiscount = 0.99

// evictionEdge is what one backend's evictions say of its LRU.
type evictionEdge struct {
	newest atomic.Int64 // the newest release time (Unix ms) among the links evictions ended
	seen   atomic.Int64 // when that eviction was read (Unix ms)
}

// observe records an eviction read at now that ended links released as
// late as newest. Only a newer release moves the edge: an eviction of an
// older block says nothing the edge does not.
func (e *evictionEdge) observe(newest, now int64) {
	for {
		cur := e.newest.Load()
		if newest <= cur {
			return
		}
		if e.newest.CompareAndSwap(cur, newest) {
			e.seen.Store(now)
			return
		}
	}
}

// carryFrom copies old's edge into e (not yet in use).
func (e *evictionEdge) carryFrom(old *evictionEdge) {
	e.newest.Store(old.newest.Load())
	e.seen.Store(old.seen.Load())
}

// retention is how long the backend kept the newest released prefix it
// evicted (ms), and whether any eviction was seen.
func (e *evictionEdge) retention() (int64, bool) {
	n := e.newest.Load()
	if n == 0 {
		return 0, false
	}
	return max(e.seen.Load()-n, 0), true
}

// edgeRisk is the doubt on a claim stamped at stamp (Unix ms) at a backend
// that keeps a released prefix for retention ms by events lag ms late, for
// a request sent at now that waits wait ms for the engine's scheduler: the
// claim's margin is its expected eviction (stamp + retention - lag) less
// the request's expected admission (now + wait), and the doubt rises from
// 0 at a margin of +lag to 1 at -lag.
func edgeRisk(stamp, retention, lag, now, wait int64) float64 {
	lag = max(lag, 1)
	margin := stamp + retention - lag - now - wait
	return min(max(0.5-float64(margin)/float64(2*lag), 0), 1)
}

// noteEvicted records an eviction at b, read now, that ended links
// released as late as newest (Unix ms).
func (rt *Router) noteEvicted(b *backend, newest int64) {
	b.edge.observe(newest, rt.now().UnixMilli())
}

// edgeDiscount is the share of c's trusted match (m, on b) that the
// eviction edge doubts: 0 when eviction-edge pricing is off, b has seen no
// eviction yet or the claim is expected to outlive the request's wait.
// Only the blocks beyond the deepest of the prompt's claims that is
// expected to outlive it are doubted.
func (rt *Router) edgeDiscount(st *reqState, b *backend, c *Candidate, m tree.Match, now time.Time) float64 {
	pc := rt.precise
	if rt.orderKept(b) {
		return rt.orderDiscount(st, b, c, m) // evictorder_route.go
	}
	if pc == nil || pc.cfg.EvictionLag <= 0 || m.Blocks <= 0 {
		return 0
	}
	r, ok := b.edge.retention()
	if !ok {
		return 0
	}
	lag := pc.cfg.EvictionLag.Milliseconds()
	nowMs := now.UnixMilli()
	wait := int64(0)
	if queued := c.Load.PendingPrefill + c.Load.PeerPendingPrefill; queued > 0 {
		if rate := b.queue.rate(); rate > 0 {
			wait = int64(math.Min(queued/rate*1e3, float64(time.Hour.Milliseconds())))
		}
	}
	risk := func(ts tree.Timestamp) float64 { return edgeRisk(ts.Millis(), r, lag, nowMs, wait) }
	deep := risk(m.Time)
	if deep == 0 {
		return 0
	}
	return doubtBeyondSafe(st, c, m, deep, func(_ int, d int32) bool {
		ts, ok := rt.ix.ClaimTime(&st.chain, d, b.id, nowMs)
		return ok && risk(ts) == 0
	})
}

// doubtBeyondSafe is the discount of c's trusted match m whose deepest
// claim is doubted at deep: the deepest claim of the prompt short of m
// that safe says will last keeps its blocks believed; the ones between it
// and m at their own risk would take more probes than they are worth: they
// count at m's. Shared by the eviction edge and the eviction order.
func doubtBeyondSafe(st *reqState, c *Candidate, m tree.Match, deep float64, safe func(i int, d int32) bool) float64 {
	kept := int32(0)
	for i := len(st.chain.Learn) - 1; i >= 0; i-- {
		if d := st.chain.Learn[i]; d < m.Blocks && int(d) <= len(st.chain.Keys) && safe(i, d) {
			kept = d
			break
		}
	}
	matched := float64(c.MatchedUnits(&st.chain))
	if matched <= 0 {
		return 0
	}
	keptUnits := min(float64(st.chain.UnitsAt(int(kept))), matched)
	return min(deep*(matched-keptUnits)/matched, maxEdgeDiscount)
}
